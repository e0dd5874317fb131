"""``@job(atomic=True)``: a handler's writes commit with the job's fenced completion.

Where the ack joins the handler's transaction (``effects_with_ack``: the local backend, the
SQS ledger) a run that lost its lease commits nothing. Where it cannot (redis), a completion
mark per job id in the same transaction lets the first run to commit own the effects. Either
way a job's writes land once, whatever the deliveries (docs/effects.md).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from django_blamequeue import audit, current_job, queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.jobs.registry import JobDefinition
from django_blamequeue.testing import capture_events, wait_until
from django_blamequeue.worker import chaos
from tests.procapp.models import Write

from .support import claim_one, later, row


def write(payload: dict[str, Any] | None) -> dict[str, int]:
    """One row per run; ``{"fail": True}`` raises after writing, ``{"sleep": s}`` works
    ``s`` seconds after writing (reporting progress first)."""
    payload = payload or {}
    ctx = current_job()
    Write.objects.using(ctx.backend.effects_database).create(
        job_id=ctx.job_id, attempt=ctx.attempt, token=ctx.token
    )
    if payload.get("sleep"):
        ctx.progress(50)
        time.sleep(payload["sleep"])  # the workload itself, past the lease
    if payload.get("fail"):
        raise RuntimeError("failed after its write")
    return {"wrote": ctx.attempt}


def writes(engine: Backend, job_id: str) -> list[int]:
    rows = Write.objects.using(engine.effects_database).filter(job_id=job_id).order_by("id")
    return list(rows.values_list("attempt", flat=True))


@pytest.fixture
def atomic(backend: str, register: Any) -> JobDefinition:
    definition: JobDefinition = register(write, atomic=True, backend=backend, max_attempts=3)
    return definition


def test_an_atomic_jobs_writes_commit_with_its_completion(
    backend: str, engine: Backend, atomic: JobDefinition
) -> None:
    job_id = atomic.enqueue({}).job_id
    queue.consume(atomic.queue, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: row(engine, job_id)["state"] == "done", 15)
    assert writes(engine, job_id) == [1]
    assert row(engine, job_id)["result"] == {"wrote": 1}


def test_a_failing_atomic_attempt_rolls_its_writes_back_and_records_the_failure(
    backend: str, engine: Backend, atomic: JobDefinition
) -> None:
    job_id = atomic.enqueue({"fail": True}, max_attempts=1).job_id
    queue.consume(atomic.queue, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: row(engine, job_id)["state"] == "failed", 15)
    assert writes(engine, job_id) == []
    assert row(engine, job_id)["error"] == "RuntimeError: failed after its write"


def test_a_job_run_by_a_stale_and_a_fresh_worker_keeps_one_set_of_writes(
    backend: str, engine: Backend, atomic: JobDefinition
) -> None:
    """The stale run goes first, then the worker that took the job over."""
    job_id = atomic.enqueue({}).job_id
    t = later(engine, 0)
    stale = claim_one(engine, atomic.queue, lease=30, now=t)
    engine.rescue_expired(later(engine, 31, t), max_stalled=5)
    fresh = claim_one(engine, atomic.queue, lease=30, now=later(engine, 32, t))
    late = chaos.run_claimed(engine, stale, None, later(engine, 33, t))
    taker = chaos.run_claimed(engine, fresh, None, later(engine, 34, t))
    assert late.ack is not None and not late.ack.ok
    assert taker.ack is not None and (taker.ack.ok, taker.ack.state) == (True, "done")
    assert len(writes(engine, job_id)) == 1
    assert row(engine, job_id)["state"] == "done"


@pytest.mark.requires("effects_with_ack")
def test_a_run_that_lost_its_lease_commits_nothing_and_its_attempt_ends_lock_lost(
    backend: str, engine: Backend, atomic: JobDefinition
) -> None:
    job_id = atomic.enqueue({}).job_id
    t = later(engine, 0)
    stale = claim_one(engine, atomic.queue, lease=30, now=t)
    engine.rescue_expired(later(engine, 31, t), max_stalled=5)
    fresh = claim_one(engine, atomic.queue, lease=30, now=later(engine, 32, t))
    before = row(engine, job_id)
    with capture_events() as events:
        late = chaos.run_claimed(engine, stale, None, later(engine, 33, t))
    assert late.ack is not None and not late.ack.ok
    assert writes(engine, job_id) == []
    assert row(engine, job_id) == before
    [lost] = events.of(audit.LOCK_LOST)
    assert (lost.job_id, lost.attempt) == (job_id, 1)
    assert lost.data == {"wanted": "done", "atomic": True, "rolled_back": True, "at": "commit"}
    chaos.run_claimed(engine, fresh, None, later(engine, 34, t))
    assert writes(engine, job_id) == [2]
    assert row(engine, job_id)["result"] == {"wrote": 2}


@pytest.mark.requires("!effects_with_ack")
def test_with_completion_marks_the_first_run_to_commit_owns_the_effects(
    backend: str, engine: Backend, atomic: JobDefinition
) -> None:
    """The stale run commits first (its mark and writes); the fresh run finds the mark,
    rolls back and completes the job with the stale run's result."""
    job_id = atomic.enqueue({}).job_id
    t = later(engine, 0)
    stale = claim_one(engine, atomic.queue, lease=30, now=t)
    engine.rescue_expired(later(engine, 31, t), max_stalled=5)
    fresh = claim_one(engine, atomic.queue, lease=30, now=later(engine, 32, t))
    late = chaos.run_claimed(engine, stale, None, later(engine, 33, t))
    assert late.ack is not None and not late.ack.ok  # its Lua ack is fenced
    assert writes(engine, job_id) == [1]
    with capture_events() as events:
        chaos.run_claimed(engine, fresh, None, later(engine, 34, t))
    assert writes(engine, job_id) == [1]
    assert (row(engine, job_id)["state"], row(engine, job_id)["result"]) == ("done", {"wrote": 1})
    [duplicate] = events.of(audit.EFFECTS_DUPLICATE)
    assert (duplicate.attempt, duplicate.data["committed_by_attempt"]) == (2, 1)


def test_a_second_delivery_after_the_job_is_done_changes_no_writes(
    backend: str, engine: Backend, atomic: JobDefinition
) -> None:
    job_id = atomic.enqueue({}).job_id
    c = claim_one(engine, atomic.queue)
    first = chaos.run_claimed(engine, c, None, later(engine, 0))
    again = chaos.run_claimed(engine, c, None, later(engine, 1))  # same id, same lease
    assert first.ack is not None and first.ack.ok
    assert again.ack is not None and not again.ack.ok
    assert writes(engine, job_id) == [1]


def test_a_run_whose_worker_died_after_its_commit_leaves_one_set_of_writes(
    backend: str, engine: Backend, atomic: JobDefinition
) -> None:
    """No ack after the commit: where the ack joined the commit the job is done already;
    elsewhere its lease expires, and the next run finds the effects committed."""
    job_id = atomic.enqueue({}).job_id
    t = later(engine, 0)
    c = claim_one(engine, atomic.queue, lease=30, now=t)
    chaos.run_claimed(engine, c, None, t, ack=False)
    engine.rescue_expired(later(engine, 31, t), max_stalled=5)
    for again in engine.claim([atomic.queue], 1, 30, now=later(engine, 32, t)):
        chaos.run_claimed(engine, again, None, later(engine, 33, t))
    assert row(engine, job_id)["state"] == "done"
    assert writes(engine, job_id) == [1]


def test_an_atomic_handler_running_past_its_lease_keeps_it(
    backend: str, engine: Backend, atomic: JobDefinition
) -> None:
    """Lease 1 s, a handler that writes, reports progress and works 1.6 s more, and a
    rescuer pass every 50 ms: renewals go on while the handler's transaction is open (on
    SQLite, where the transaction holds the write lock, nobody can take the job over)."""
    job_id = atomic.enqueue({"sleep": 1.6}).job_id
    with capture_events() as events:
        queue.consume(atomic.queue, backend=backend, lease=1, poll_interval=0.05)
        assert wait_until(lambda: row(engine, job_id)["state"] == "inflight", 10)
        while row(engine, job_id)["state"] == "inflight":
            report = engine.rescue_expired()
            assert (report.repended, report.failed) == (0, 0), "a renewed lease was rescued"
            time.sleep(0.05)  # pacing the rescuer, not waiting for a result
    info = row(engine, job_id)
    assert (info["state"], info["attempts"], info["result"]) == ("done", 1, {"wrote": 1})
    assert writes(engine, job_id) == [1]
    assert not events.of(audit.STALLED) and not events.of(audit.LOCK_LOST)


@pytest.mark.requires("!effects_with_ack")
def test_completion_marks_are_pruned_with_the_done_jobs_retention(
    backend: str, engine: Backend, atomic: JobDefinition
) -> None:
    from django_blamequeue.conf import get_settings
    from django_blamequeue.models import EffectMark
    from django_blamequeue.sweeper.pruner import Pruner

    job_id = atomic.enqueue({}).job_id
    chaos.run_claimed(engine, claim_one(engine, atomic.queue), None, later(engine, 0))
    marks = EffectMark.objects.using(engine.effects_database).filter(job_id=job_id)
    assert marks.exists()
    Pruner(engine, settings=get_settings()).run_once(later(engine, 6 * 86400))
    assert marks.exists()
    Pruner(engine, settings=get_settings()).run_once(later(engine, 7 * 86400 + 60))
    assert not marks.exists()
