"""``BlameQueueTask``: Django's ``Task`` with the job options ``@task`` may pass."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django_blamequeue.core.options import JobOptions
from django_blamequeue.tasks.compat import Task

#: The job options a ``BlameQueueTask`` carries beyond Django's fields (stored with each run),
#: by their ``JobOptions`` names.
TASK_OPTIONS = ("max_attempts", "timeout", "dedupe_key")


def job_options(task: object) -> JobOptions:
    """The job options a task carries (none for a plain Django ``Task``)."""
    given: dict[str, Any] = {k: getattr(task, k, None) for k in TASK_OPTIONS}
    return JobOptions(**given)


if TYPE_CHECKING:
    _TaskBase = Task[..., Any]
else:
    _TaskBase = Task


@dataclass(frozen=True, slots=True, kw_only=True)
class BlameQueueTask(_TaskBase):
    """Django's ``Task`` plus the job options ``@task`` may pass: attempts, timeout, dedupe."""

    max_attempts: int | None = None  # None: the job default (DEFAULT_MAX_ATTEMPTS)
    timeout: float | None = None  # seconds per attempt; set with @task only
    dedupe_key: str | None = None  # at most one unfinished run per (queue, key)

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: datetime | None = None,
        backend: str | None = None,
        max_attempts: int | None = None,
        dedupe_key: str | None = None,
    ) -> BlameQueueTask:
        """A copy with other defaults (Django's four, plus ``max_attempts``/``dedupe_key``)."""
        given = {
            "priority": priority,
            "queue_name": queue_name,
            "run_after": run_after,
            "backend": backend,
            "max_attempts": max_attempts,
            "dedupe_key": dedupe_key,
        }
        changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        return replace(self, **changes)
