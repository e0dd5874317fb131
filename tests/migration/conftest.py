"""The user-facing fixtures, as a project moving over from Celery would load them."""

from django_blamequeue.pytest_plugin import blamequeue_jobs, jobs_enqueued, run_jobs

__all__ = ["blamequeue_jobs", "jobs_enqueued", "run_jobs"]
