"""Small helpers for driving a backend's verbs directly (claims, acks, moved clocks)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django_blamequeue.backends.base import Backend
from django_blamequeue.core import lifecycle
from django_blamequeue.models import Job
from django_blamequeue.records import Ack, AckResult, Claimed, Transition


def later(engine: Backend, seconds: float, start: datetime | None = None) -> datetime:
    """The engine's clock moved ``seconds`` ahead (instead of sleeping)."""
    return (start or engine.now()) + timedelta(seconds=seconds)


def claim_one(
    engine: Backend, queue: str, *, lease: float = 30.0, now: datetime | None = None
) -> Claimed:
    claimed = engine.claim([queue], 1, lease, now=now)
    assert len(claimed) == 1, f"expected one claimable job on {queue!r}, got {claimed}"
    return claimed[0]


def ack(
    engine: Backend,
    c: Claimed,
    transition: Transition,
    *,
    token: str | None = None,
    now: datetime | None = None,
) -> AckResult:
    (result,) = engine.apply_many(
        [Ack(job_id=c.job_id, token=token or c.token, transition=transition)], now=now
    )
    return result


def outcome(c: Claimed, what: lifecycle.Outcome) -> Transition:
    return lifecycle.decide(
        what, attempt=c.attempt, max_attempts=c.max_attempts, policy=lifecycle.Policy()
    )


def succeed(engine: Backend, c: Claimed, **kwargs: Any) -> AckResult:
    return ack(engine, c, outcome(c, lifecycle.Succeeded(None)), **kwargs)


def fail(engine: Backend, c: Claimed, exc: BaseException | None = None, **kwargs: Any) -> AckResult:
    exc = exc or RuntimeError("handler failed")
    return ack(engine, c, outcome(c, lifecycle.Raised(exc, "Traceback: ...")), **kwargs)


def to_dlq(engine: Backend, queue: str, payload: Any = None) -> str:
    """A job of ``queue`` in the DLQ (failed after its only attempt); answers its id."""
    from django_blamequeue import queue as q

    job_id = q.enqueue(queue, payload, max_attempts=1, backend=engine.alias).job_id
    c = claim_one(engine, queue)
    assert c.job_id == job_id
    assert fail(engine, c).state == "failed"
    return job_id


def row(engine: Backend, job_id: str) -> dict[str, Any]:
    """Every column of a job, for "changes nothing" comparisons."""
    values: dict[str, Any] = Job.objects.using(engine.db).filter(id=job_id).values().get()  # type: ignore[attr-defined]
    return values


def jobs_in(engine: Backend, queue: str) -> int:
    n: int = Job.objects.using(engine.db).filter(queue=queue).count()  # type: ignore[attr-defined]
    return n
