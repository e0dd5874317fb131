"""The local backend: jobs are rows of the project's own database (SQLite or PostgreSQL)."""

from django_blamequeue.backends.database.backend import DatabaseBackend

__all__ = ["DatabaseBackend"]
