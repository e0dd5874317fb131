"""The user-facing fixtures, loaded the way a project's conftest would get them."""

from django_blamequeue.pytest_plugin import (
    blamequeue_chaos,
    blamequeue_jobs,
    jobs_enqueued,
    run_jobs,
)

__all__ = ["blamequeue_chaos", "blamequeue_jobs", "jobs_enqueued", "run_jobs"]
