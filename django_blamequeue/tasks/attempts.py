"""Each attempt of a task run, recorded: which worker ran it, and how it ended.

Django's ``TaskResult`` has ``worker_ids`` (one per attempt) and ``errors`` (one per failed
attempt); a job row keeps only its last error. The task's runner records a ``TaskAttempt`` when
an attempt starts and when it ends, in the Django database of the job's backend, outside the
job's own transactions: the history can miss the end of an attempt whose worker was killed
(its job's error says what happened), never the job's state. A write that meets SQLite's write
lock (held a moment by the worker's own claims, acks and sweeper) is tried again for about 4 s
instead of being dropped, so ``worker_ids`` and ``errors`` stay complete under load.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import connections
from django.utils import timezone

from django_blamequeue.backends import get_backend
from django_blamequeue.backends.resilience import retry_while_locked
from django_blamequeue.models import TaskAttempt
from django_blamequeue.relay.outbox import database_of
from django_blamequeue.tasks.compat import TaskError

logger = logging.getLogger("django_blamequeue.tasks")


def database(alias: str) -> str:
    """The Django database of backend ``alias``'s task attempts (its audit rows' database)."""
    return database_of(get_backend(alias))


def started(alias: str, job_id: str, attempt: int, worker_id: str, at: datetime) -> None:
    """Attempt ``attempt`` began on ``worker_id`` (a released attempt, given back and run
    again, is the same number: its row is taken over)."""
    db = database(alias)
    try:
        retry_while_locked(
            lambda: TaskAttempt.objects.using(db).update_or_create(
                job_id=job_id,
                attempt=attempt,
                defaults={
                    "worker_id": worker_id[:255],
                    "started_at": at,
                    "finished_at": None,
                    "exception_class_path": None,
                    "traceback": None,
                },
            ),
            tries=_tries(db),
        )
    except Exception:  # the history must never fail the task
        logger.warning("recording attempt %d of task %s failed", attempt, job_id, exc_info=True)


def ended(alias: str, job_id: str, attempt: int, error: TaskError | None) -> None:
    """Attempt ``attempt`` ended, with ``error`` when it failed."""
    db = database(alias)
    rows = TaskAttempt.objects.using(db).filter(job_id=job_id, attempt=attempt)
    try:
        retry_while_locked(
            lambda: rows.update(
                finished_at=timezone.now(),
                exception_class_path=error.exception_class_path[:255] if error else None,
                traceback=error.traceback if error else None,
            ),
            tries=_tries(db),
        )
    except Exception:
        logger.warning("recording the end of task %s failed", job_id, exc_info=True)


def _tries(db: str) -> int:
    """Each write is a transaction of its own, so it may be tried again while SQLite's write
    lock is held elsewhere (a worker's claim, its sweeper); inside a caller's transaction a
    failed statement cannot be repeated."""
    return 1 if connections[db].in_atomic_block else 8


def of(alias: str, job_id: str) -> list[TaskAttempt]:
    """The recorded attempts of a task run, oldest first."""
    return list(
        TaskAttempt.objects.using(database(alias)).filter(job_id=job_id).order_by("attempt")
    )
