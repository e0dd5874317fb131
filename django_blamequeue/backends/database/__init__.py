"""The local backend: jobs are rows of the project's own database (SQLite or PostgreSQL)."""

from .backend import DatabaseBackend

__all__ = ["DatabaseBackend"]
