"""Cross-backend flow work: what lands on another backend than the one that wrote it.

A flow's children may live on other backends than their parent (``Child(..., backend=)``),
so a child's report, a cascading cancel or a child's enqueue can cross from one backend to
another. No backend reaches another one itself: it writes an outbox entry, or asks through
its ``Hooks``, and this module — above the backends — calls the target backend's verbs.
The outbox relay (``outbox``) delivers through here, and the flow sweeper repairs through
here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django_blamequeue.backends import get_backend
from django_blamequeue.backends.base import Backend
from django_blamequeue.core.records import NewJob, Report

logger = logging.getLogger("django_blamequeue.flows")


def target(alias: str) -> Backend:
    """The backend an entry is bound for (``UNKNOWN_BACKEND`` for an alias not configured)."""
    return get_backend(alias)


def deliver_jobs(alias: str, jobs: Sequence[NewJob]) -> None:
    """Enqueue outboxed jobs on their backend (idempotent there: the ids are fixed)."""
    get_backend(alias).enqueue_many(jobs)


def deliver_reports(alias: str, reports: Sequence[Report]) -> None:
    """Record outboxed child reports on their parent's backend (once each there)."""
    get_backend(alias).deliver_reports(reports)


def cancel_children(children: Sequence[tuple[str, str]]) -> int:
    """Cancel ``(backend alias, job id)`` children wherever they live; one that fails is
    logged and left to the flow sweeper, which cascades again. Answers how many were asked."""
    n = 0
    for alias, child_id in children:
        try:
            get_backend(alias).cancel(child_id)
            n += 1
        except Exception as exc:
            logger.warning(
                "cascade to child %s on %s failed: %s: %s",
                child_id,
                alias,
                type(exc).__name__,
                exc,
            )
    return n
