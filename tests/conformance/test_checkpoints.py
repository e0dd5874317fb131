"""``current_job().checkpoint(value)`` stores where a long job stands, fenced by
the lease token; ``current_job().last_checkpoint`` gives the next attempt what the previous one
saved (None at first), whether that attempt failed, timed out, was released at shutdown or
was rescued after its worker died. Writes are throttled like progress, and the last value of
an attempt is stored before its ack, whatever the outcome."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_blamequeue import ErrorCode, QueueError, current_job, queue
from django_blamequeue.audit import CHECKPOINT
from django_blamequeue.backends.base import Backend
from django_blamequeue.core import lifecycle
from django_blamequeue.core.checkpoints import MAX_CHECKPOINT_BYTES
from django_blamequeue.exceptions import LeaseLost
from django_blamequeue.testing import wait_until

from .support import ack, audit_rows, claim_one, later, outcome, row, succeed


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def finished(job_id: str, backend: str) -> Any:
    """The job once it is done (its result), or fail after 10 s."""
    assert wait_until(lambda: queue.get_job(job_id, backend=backend).state == "done", 10)  # type: ignore[union-attr]
    return queue.get_job(job_id, backend=backend).result  # type: ignore[union-attr]


# -- the verb: stored with the lease, fenced by its token -----------------------------------
def test_a_first_attempt_has_no_checkpoint(backend: str, engine: Backend) -> None:
    queue.enqueue("cp", {}, backend=backend)
    assert claim_one(engine, "cp").checkpoint is None


def test_the_next_claim_hands_over_what_the_last_attempt_stored(
    backend: str, engine: Backend
) -> None:
    job_id = queue.enqueue("cp", {}, backend=backend).job_id
    first = claim_one(engine, "cp")
    assert engine.save_checkpoints([(job_id, first.token, '{"at":3}')]) == frozenset()
    assert engine.save_checkpoints([(job_id, first.token, '{"at":7}')]) == frozenset()
    assert ack(engine, first, outcome(first, lifecycle.Released())).ok
    second = claim_one(engine, "cp")
    assert (second.job_id, second.checkpoint) == (job_id, '{"at":7}')
    assert queue.get_job(job_id, backend=backend).checkpoint == {"at": 7}  # type: ignore[union-attr]


@pytest.mark.requires("supports_time_travel")
def test_a_rescued_job_resumes_from_the_checkpoint_of_the_attempt_that_died(
    backend: str, engine: Backend
) -> None:
    job_id = queue.enqueue("cp", {}, backend=backend).job_id
    first = claim_one(engine, "cp", lease=1)
    engine.save_checkpoints([(job_id, first.token, "41")])
    report = engine.rescue_expired(later(engine, 5))  # its worker was killed
    assert report.repended == 1
    second = claim_one(engine, "cp", now=later(engine, 6))
    assert (second.attempt, second.checkpoint) == (2, "41")


def test_a_checkpoint_with_a_stale_token_is_refused_and_changes_nothing(
    backend: str, engine: Backend
) -> None:
    job_id = queue.enqueue("cp", {}, backend=backend).job_id
    held = claim_one(engine, "cp")
    engine.save_checkpoints([(job_id, held.token, '"mine"')])
    before = row(engine, job_id)
    assert engine.save_checkpoints([(job_id, "0" * 32, '"stale"')]) == frozenset({job_id})
    assert row(engine, job_id) == before


def test_a_worker_that_lost_the_job_cannot_checkpoint_it(backend: str, engine: Backend) -> None:
    """The first holder's lease went to another worker: its late write is refused, and the
    new holder's value stands."""
    job_id = queue.enqueue("cp", {}, backend=backend).job_id
    old = claim_one(engine, "cp")
    assert ack(engine, old, outcome(old, lifecycle.Released())).ok  # as if taken over
    new = claim_one(engine, "cp")
    engine.save_checkpoints([(job_id, new.token, '"new"')])
    assert engine.save_checkpoints([(job_id, old.token, '"old"')]) == frozenset({job_id})
    assert row(engine, job_id)["checkpoint"] == "new"
    assert succeed(engine, new).ok
    assert engine.save_checkpoints([(job_id, new.token, '"late"')]) == frozenset({job_id})
    assert row(engine, job_id)["checkpoint"] == "new"  # a finished job keeps its last value


def test_one_stale_checkpoint_does_not_stop_the_others_of_its_batch(
    backend: str, engine: Backend
) -> None:
    a, b = (queue.enqueue("cp", i, backend=backend).job_id for i in range(2))
    claimed = {c.job_id: c for c in engine.claim(["cp"], 2, 30)}
    refused = engine.save_checkpoints(
        [(a, claimed[a].token, "1"), (b, "f" * 32, "2"), (b, claimed[b].token, "3")]
    )
    assert refused == frozenset()  # the last value given for a job is the one written
    assert (row(engine, a)["checkpoint"], row(engine, b)["checkpoint"]) == (1, 3)
    assert engine.save_checkpoints([(a, "e" * 32, "9"), (b, claimed[b].token, "4")]) == {a}
    assert (row(engine, a)["checkpoint"], row(engine, b)["checkpoint"]) == (1, 4)


# -- through the worker ------------------------------------------------------------------------
@pytest.mark.requires("supports_time_travel")
def test_a_worker_whose_job_was_taken_over_cannot_store_its_checkpoint(
    backend: str, engine: Backend, register: Callable[..., Any], release: threading.Event
) -> None:
    holding = threading.Event()
    saw: list[type[BaseException]] = []

    def stalls(payload: Any) -> None:
        ctx = current_job()
        ctx.checkpoint("mine", wait=True)
        holding.set()
        release.wait(10)  # meanwhile its lease expires and another worker takes the job
        try:
            ctx.checkpoint("stale", wait=True)
        except BaseException as exc:
            saw.append(type(exc))
            raise

    definition = register(stalls, max_attempts=5)
    job_id = definition.enqueue({}, backend=backend).job_id
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert holding.wait(10)
    assert engine.rescue_expired(later(engine, 60)).repended == 1  # as if it had stalled
    other = claim_one(engine, definition.queue, now=later(engine, 61))
    engine.save_checkpoints([(job_id, other.token, '"theirs"')])
    release.set()
    assert wait_until(lambda: bool(saw), 10)
    assert saw[0] in (QueueError, LeaseLost)  # refused, or stopped first by the heartbeat
    r = row(engine, job_id)
    assert (r["state"], r["checkpoint"], r["attempts"]) == ("inflight", "theirs", 2)


def test_a_retried_job_resumes_where_its_failed_attempt_stopped(
    backend: str, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(BACKOFF_BASE=0.01, BACKOFF_MAX=0.01)
    seen: list[Any] = []

    def steps(payload: Any) -> int:
        ctx = current_job()
        seen.append(ctx.last_checkpoint)
        start = ctx.last_checkpoint or 0
        for step in range(start, 10):
            if step == 4 and ctx.attempt == 1:
                raise RuntimeError("step 4 failed")
            ctx.checkpoint(step + 1)
            assert ctx.last_checkpoint == seen[-1]  # still the previous attempt's
        return start

    definition = register(steps, max_attempts=2)
    job_id = definition.enqueue({}, backend=backend).job_id
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert finished(job_id, backend) == 4
    assert seen == [None, 4]
    assert queue.get_job(job_id, backend=backend).checkpoint == 10  # type: ignore[union-attr]


def test_a_timed_out_job_resumes_from_its_checkpoint(
    backend: str, register: Callable[..., Any], release: threading.Event
) -> None:
    def stalls_once(payload: Any) -> Any:
        ctx = current_job()
        if ctx.attempt == 1:
            ctx.checkpoint({"page": 12})
            release.wait(30)  # past the timeout: interrupted, its last value stored first
        return ctx.last_checkpoint

    definition = register(stalls_once, timeout=0.5, max_attempts=2)
    job_id = definition.enqueue({}, backend=backend).job_id
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert finished(job_id, backend) == {"page": 12}


def test_a_job_released_at_shutdown_resumes_from_its_checkpoint(
    backend: str, register: Callable[..., Any]
) -> None:
    running = threading.Event()

    def long(payload: Any) -> Any:
        ctx = current_job()
        if ctx.last_checkpoint is None:  # (a release gives the attempt back: attempt 1 again)
            for i in range(1, 1_000_000):
                ctx.checkpoint(i)  # throttled: the last one is stored at the release
                running.set()
                time.sleep(0.001)
        return ctx.last_checkpoint

    definition = register(long)
    job_id = definition.enqueue({}, backend=backend).job_id
    consumer = queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert running.wait(10)
    consumer.cancel(grace=0.3)
    assert consumer.join(10)
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and (info.state, info.attempts) == ("pending", 0)
    stored = info.checkpoint
    assert isinstance(stored, int) and stored > 0
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    result = finished(job_id, backend)
    assert stored <= result <= stored + 1  # at most the value being written at the release


def test_checkpoints_are_throttled_but_the_last_value_is_never_lost(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(AUDIT="all", BACKOFF_BASE=0.01, BACKOFF_MAX=0.01)

    def tight_loop(payload: Any) -> Any:
        ctx = current_job()
        if ctx.attempt == 1:
            for i in range(2000):
                ctx.checkpoint(i)
            raise RuntimeError("fails right after its last checkpoint")
        return ctx.last_checkpoint

    definition = register(tight_loop, max_attempts=2)
    job_id = definition.enqueue({}, backend=backend).job_id
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert finished(job_id, backend) == 1999
    writes = audit_rows(engine).filter(action=CHECKPOINT, job_id=job_id).count()
    # 2,000 calls, a handful of writes: the first (unless the attempt ended before the main
    # thread's next round, when it coalesces with the last), a throttled few, the last
    assert 1 <= writes < 20, writes


def test_a_checkpoint_waited_for_is_stored_when_the_call_returns(
    backend: str, engine: Backend, register: Callable[..., Any]
) -> None:
    seen: list[Any] = []

    def durable(payload: Any) -> None:
        ctx = current_job()
        for step in range(3):
            ctx.checkpoint({"step": step}, wait=True)
            seen.append(row(engine, ctx.job_id)["checkpoint"])

    definition = register(durable)
    job_id = definition.enqueue({}, backend=backend).job_id
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    finished(job_id, backend)
    assert seen == [{"step": 0}, {"step": 1}, {"step": 2}]


def test_an_async_job_checkpoints_and_resumes(
    backend: str, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(BACKOFF_BASE=0.01, BACKOFF_MAX=0.01)

    async def pages(payload: Any) -> Any:
        ctx = current_job()
        if ctx.attempt == 1:
            await ctx.acheckpoint({"page": 1})
            await asyncio.sleep(0)
            ctx.checkpoint({"page": 2})  # never blocks the loop
            with pytest.raises(QueueError) as caught:
                ctx.checkpoint({"page": 3}, wait=True)  # would block the loop
            assert caught.value.code == ErrorCode.INVALID_HANDLER
            raise RuntimeError("page 3 failed")
        return ctx.last_checkpoint

    definition = register(pages, max_attempts=2)
    job_id = definition.enqueue({}, backend=backend).job_id
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert finished(job_id, backend) == {"page": 2}


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (object(), ErrorCode.BAD_CHECKPOINT),
        (float("nan"), ErrorCode.BAD_CHECKPOINT),
        ({"ids": {1, 2}}, ErrorCode.BAD_CHECKPOINT),
        ("nul\x00", ErrorCode.BAD_CHECKPOINT),
        ("x" * MAX_CHECKPOINT_BYTES, ErrorCode.CHECKPOINT_TOO_LARGE),
    ],
    ids=["object", "nan", "set", "nul", "too-large"],
)
def test_a_bad_checkpoint_is_refused_and_the_stored_one_is_kept(
    backend: str, engine: Backend, register: Callable[..., Any], value: Any, code: ErrorCode
) -> None:
    caught: list[ErrorCode] = []

    def bad(payload: Any) -> str:
        ctx = current_job()
        ctx.checkpoint("good", wait=True)
        try:
            ctx.checkpoint(value)
        except QueueError as exc:
            caught.append(exc.code)
        return "went on"

    definition = register(bad)
    job_id = definition.enqueue({}, backend=backend).job_id
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert finished(job_id, backend) == "went on"
    assert caught == [code]
    assert row(engine, job_id)["checkpoint"] == "good"


def test_the_largest_checkpoint_is_stored_whole(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("cp", {}, backend=backend).job_id
    c = claim_one(engine, "cp")
    text = '"' + "é" * ((MAX_CHECKPOINT_BYTES - 2) // 2) + '"'
    assert engine.save_checkpoints([(job_id, c.token, text)]) == frozenset()
    assert ack(engine, c, outcome(c, lifecycle.Released())).ok
    assert claim_one(engine, "cp").checkpoint == text


def test_an_atomic_job_takes_no_checkpoint(backend: str, register: Callable[..., Any]) -> None:
    """Its writes roll back with a failed attempt: a checkpoint kept outside that transaction
    would have the next attempt skip work that was undone."""
    caught: list[ErrorCode] = []

    def atomic_steps(payload: Any) -> str:
        ctx = current_job()
        try:
            ctx.checkpoint(3)
        except QueueError as exc:
            caught.append(exc.code)
        return "done"

    definition = register(atomic_steps, atomic=True, backend=backend)
    job_id = definition.enqueue({}).job_id
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert finished(job_id, backend) == "done"
    assert caught == [ErrorCode.INVALID_HANDLER]
    assert queue.get_job(job_id, backend=backend).checkpoint is None  # type: ignore[union-attr]
