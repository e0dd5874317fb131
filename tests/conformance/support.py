"""Helpers for driving a backend's verbs directly (claims, acks, moved clocks).

Everything here goes through the ``Backend`` interface, never a backend's own storage, so
each helper means the same on SQLite, PostgreSQL, Redis and SQS.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connections

from django_blamequeue.backends.base import Backend
from django_blamequeue.core import lifecycle
from django_blamequeue.core.records import Ack, AckResult, Claimed, Transition
from django_blamequeue.models import AuditEvent
from django_blamequeue.relay.outbox import database_of


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
    """Everything the backend tells about a job, for "changes nothing" comparisons."""
    info = engine.get(job_id)
    assert info is not None, f"job {job_id} not found on {engine.alias}"
    return dataclasses.asdict(info)


def jobs_in(engine: Backend, queue: str) -> int:
    """How many jobs the queue holds, in any state."""
    return sum(sum(s.counts.values()) for s in engine.stats() if s.queue == queue)


def audit_db(engine: Backend) -> str:
    """The Django database that holds the backend's audit rows."""
    return engine.database or database_of(engine)


def audit_rows(engine: Backend) -> Any:
    return AuditEvent.objects.using(audit_db(engine))


def nothing_written(engine: Backend) -> bool:
    """No job on the backend and no audit row (nothing half-written by a refusal)."""
    jobs = sum(sum(s.counts.values()) for s in engine.stats())
    return jobs == 0 and not audit_rows(engine).exists()


def in_transaction(engine: Backend) -> Any:
    """``transaction.atomic()`` on the database an enqueue to ``engine`` joins."""
    from django.db import transaction

    return transaction.atomic(using=audit_db(engine))


def relay(engine: Backend) -> None:
    """One pass of the outbox relay over the database ``engine``'s enqueues go through
    (whatever was committed there is delivered when this returns)."""
    from django_blamequeue.relay.outbox import Relay

    Relay(databases=[audit_db(engine)]).run_once()


def close_connections() -> None:
    connections.close_all()


def another_backend(backend: str) -> str:
    """A second backend whose jobs are not in ``backend``'s store: "default" (SQLite), or
    "postgres" beside it or beside an engine that shares its table. Skips where it is missing
    (fails where ``make test`` started it)."""
    from django_blamequeue.backends import get_backend
    from tests.conftest import need_server

    table = get_backend(backend).database  # None: the engine keeps its own store
    for other in ("default", "postgres"):
        if other == backend:
            continue
        need_server(other)
        if table is None or get_backend(other).database != table:
            return other
    pytest.skip(f"no backend keeps its jobs apart from {backend!r}")
