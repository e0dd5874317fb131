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
from dataclasses import replace

from django_blamequeue.backends import get_backend
from django_blamequeue.backends.base import Backend
from django_blamequeue.core.records import NewJob, Report

logger = logging.getLogger("django_blamequeue.flows")


def target(alias: str) -> Backend:
    """The backend an entry is bound for (``UNKNOWN_BACKEND`` for an alias not configured)."""
    return get_backend(alias)


def deliver_jobs(alias: str, jobs: Sequence[NewJob]) -> None:
    """Enqueue outboxed jobs on their backend (idempotent there: the ids are fixed).

    A unique job that refuses a held key (``on_conflict="reject"``) cannot raise to its
    caller any more, whose transaction committed: it is delivered as ``skip``, and a
    refusal is logged (docs/unique.md)."""
    late = [replace(j, unique_mode="skip") if j.unique_mode == "reject" else j for j in jobs]
    answers = get_backend(alias).enqueue_many(late)
    for job, answer in zip(jobs, answers, strict=True):
        if job.unique_mode == "reject" and answer.deduplicated:
            logger.warning(
                "unique key %r is held by job %s: job %s (enqueued with on_conflict='reject' "
                "inside a transaction) was not stored",
                job.unique_key,
                answer.job_id,
                job.job_id,
            )


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
