"""Expiry (rule: expiry): a job not started before its ``expires_at`` never runs; it ends
``cancelled`` with reason ``expired``, audited, counted in stats — on every backend.

Time moves by passing ``now`` to the verbs (the SQS ledger decides with it too), except in
the one test that runs a worker, which waits for a real, short expiry with a deadline."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from django_blamequeue import queue
from django_blamequeue.audit import EXPIRE
from django_blamequeue.backends.base import Backend
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.sweeper.expirer import Expirer
from django_blamequeue.testing import capture_events, wait_until

from .support import claim_one, later, nothing_written, succeed


def state(engine: Backend, job_id: str) -> tuple[str, str | None]:
    info = engine.get(job_id)
    assert info is not None
    return info.state, info.reason


def test_a_job_past_its_expiry_is_never_claimed_and_ends_cancelled_as_expired(
    backend: str, engine: Backend
) -> None:
    job = queue.enqueue("x", {"n": 1}, expires=60, backend=backend)
    info = engine.get(job.job_id)
    assert info is not None and info.expires_at is not None and info.state == "pending"
    start = info.created_at
    assert info.expires_at == later(engine, 60, start)  # seconds after the enqueue
    t = later(engine, 61, start)
    with capture_events() as events:
        assert engine.claim(["x"], 10, 30, now=t) == []
        engine.expire(now=t)  # the sweep; a claim that met the job may have cancelled it
    assert state(engine, job.job_id) == ("cancelled", "expired")
    assert events.actions(job.job_id) == [EXPIRE]
    [stats] = [s for s in engine.stats() if s.queue == "x"]
    assert stats.counts["cancelled"] == 1 and stats.expired_last_hour == 1
    assert engine.expire(now=t) == []  # once


def test_a_job_claimed_before_its_expiry_runs_and_is_left_alone(
    backend: str, engine: Backend
) -> None:
    job = queue.enqueue("x", {}, expires=60, backend=backend)
    c = claim_one(engine, "x", now=later(engine, 30))
    assert c.job_id == job.job_id
    assert engine.expire(now=later(engine, 90)) == []  # in flight: not waiting
    assert succeed(engine, c).state == "done"
    assert state(engine, job.job_id) == ("done", None)


def test_the_sweep_expires_delayed_and_blocked_jobs_and_cascades_to_dependants(
    backend: str, engine: Backend
) -> None:
    delayed = queue.enqueue("x", {}, delay=600, expires=60, backend=backend).job_id
    flow = queue.enqueue_flow(
        "x",
        [{"name": "a", "expires": 60}, {"name": "b", "depends_on": ["a"]}],
        backend=backend,
    )
    ids = {j["name"]: j["job_id"] for j in flow["jobs"]}
    assert sorted(engine.expire(now=later(engine, 61))) == sorted([delayed, ids["a"]])
    assert state(engine, delayed) == ("cancelled", "expired")
    assert state(engine, ids["a"]) == ("cancelled", "expired")
    assert state(engine, ids["b"])[0] == "cancelled"  # its dependency will never be done


def test_expires_takes_an_aware_datetime_and_a_timedelta(backend: str, engine: Backend) -> None:
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
    first = queue.enqueue("x", {}, expires=at, backend=backend)
    second = queue.enqueue("x", {}, expires=timedelta(minutes=5), backend=backend)
    one, two = engine.get(first.job_id), engine.get(second.job_id)
    assert one is not None and one.expires_at == at
    assert two is not None and two.expires_at is not None and two.created_at is not None
    assert two.expires_at - two.created_at == timedelta(minutes=5)


def test_an_expired_job_frees_its_dedupe_key(backend: str, engine: Backend) -> None:
    first = queue.enqueue("x", {}, expires=60, dedupe_key="k", backend=backend)
    assert engine.expire(now=later(engine, 61)) == [first.job_id]
    second = queue.enqueue("x", {}, dedupe_key="k", backend=backend)
    assert not second.deduplicated and second.job_id != first.job_id


@pytest.mark.parametrize(
    "bad", [0, -1, float("nan"), "soon", datetime(2030, 1, 1), 10 * 3_155_760_000]
)
def test_a_bad_expires_is_refused_and_nothing_is_written(
    backend: str, engine: Backend, bad: Any
) -> None:
    with pytest.raises(QueueError) as caught:
        queue.enqueue("x", {}, expires=bad, backend=backend)
    assert caught.value.code == ErrorCode.BAD_ARGUMENT
    assert "expires" in caught.value.message
    assert nothing_written(engine)


def test_a_job_s_own_expires_applies_to_every_call_and_a_call_overrides_it(
    backend: str, engine: Backend, register: Callable[..., Any]
) -> None:
    definition = register(lambda: None, backend=backend, expires=30)
    own = definition.delay()
    given = definition.apply_async(expires=600)
    one, two = engine.get(own.job_id), engine.get(given.job_id)
    assert one is not None and one.expires_at is not None and one.created_at is not None
    assert two is not None and two.expires_at is not None and two.created_at is not None
    assert one.expires_at - one.created_at == timedelta(seconds=30)
    assert two.expires_at - two.created_at == timedelta(seconds=600)


def test_a_worker_never_runs_an_expired_job_and_the_sweeper_cancels_it(
    backend: str, engine: Backend, register: Callable[..., Any]
) -> None:
    ran: list[int] = []
    definition = register(lambda n: ran.append(n), backend=backend)
    stale = definition.apply_async([1], expires=0.2)
    fresh = definition.apply_async([2])
    assert wait_until(lambda: engine.now() > engine.get(stale.job_id).expires_at, timeout=5)  # type: ignore[union-attr]
    worker = queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    try:
        assert fresh.wait(timeout=30).state == "done"
    finally:
        worker.cancel()
        worker.join(10)
    Expirer(engine).run_once()
    assert ran == [2]
    assert state(engine, stale.job_id) == ("cancelled", "expired")
