"""worker/ahead: while runs are short a worker leases up to half its slots more than it has
free; those runs hold a lease but no slot, start the moment a slot frees, and are released
with their attempt given back at shutdown. ``concurrency`` still bounds what runs at once."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.core import lifecycle
from django_blamequeue.exceptions import JobCancelled
from django_blamequeue.testing import wait_until
from django_blamequeue.worker.ahead import QUICK_RUN, SHORT_RUN, Ahead
from django_blamequeue.worker.consumer import Consumer, WorkerOptions

Q = "ahead"


def run(started: float = 100.0, timeout: float | None = None) -> Any:
    """A stand-in for a ``Run``: only what ``Ahead`` reads and writes."""
    return SimpleNamespace(started=started, deadline=None if timeout is None else started + timeout)


def test_no_room_to_claim_ahead_until_a_run_ended_and_none_while_runs_are_long() -> None:
    ahead = Ahead(10, enabled=True)
    assert ahead.room() == 0  # nothing known about the runs yet
    ahead.ran(0.004)
    assert ahead.room() == 5  # half the slots
    for _ in range(20):
        ahead.ran(30.0)
    assert ahead.room() == 0
    for _ in range(80):
        ahead.ran(QUICK_RUN / 20)  # no-op runs end before a claim could come back
    assert ahead.room() == 0
    assert Ahead(1, enabled=True).cap == 0  # a worker of one slot never claims ahead
    assert Ahead(10, enabled=False).cap == 0  # nor one with a rate limit


def test_runs_beyond_the_open_slots_wait_and_their_timeout_starts_when_they_start() -> None:
    ahead = Ahead(4, enabled=True)
    a, b, c = run(timeout=5.0), run(timeout=5.0), run()
    assert ahead.admit([a, b, c], 1, now=100.0) == [a]
    assert (ahead.waiting, b.deadline, c.deadline) == (2, None, None)
    assert ahead.admit([], 0, now=101.0) == []  # no slot open: still waiting
    assert ahead.due(1, now=107.0) == [b]
    assert (b.started, b.deadline) == (107.0, 112.0)  # 5 s from its start, not its claim
    late = run(timeout=1.0)
    assert ahead.admit([late], 2, now=108.0) == [c, late]  # behind the one already waiting
    assert c.deadline is None and ahead.waiting == 0


def test_a_waiting_run_can_be_taken_back_and_shutdown_takes_them_all() -> None:
    ahead = Ahead(4, enabled=True)
    a, b, c = run(), run(), run()
    ahead.admit([a, b, c], 0, now=100.0)
    assert ahead.discard(b) and not ahead.discard(b)
    assert ahead.release_all() == [a, c] and ahead.waiting == 0


@pytest.mark.django_db(transaction=True)
def test_a_worker_claims_ahead_runs_no_more_than_its_slots_and_releases_waiting_runs() -> None:
    engine = get_backend("default")
    gates = {i: threading.Event() for i in range(4)}
    lock = threading.Lock()
    now_running: set[int] = set()
    most = 0

    def handler(job: Any, ctx: Any) -> None:
        nonlocal most
        with lock:
            now_running.add(job.payload["i"])
            most = max(most, len(now_running))
        gates[job.payload["i"]].wait(10)
        with lock:
            now_running.discard(job.payload["i"])

    ids = [queue.enqueue(Q, {"i": i}, backend="default").job_id for i in range(4)]
    options = WorkerOptions(queues=(Q,), concurrency=2, lease=30, register=False)
    consumer = Consumer(engine, options, handler)
    try:
        assert consumer._free_slots() == 2  # no run ended yet: no claiming ahead
        consumer._ahead.ran(SHORT_RUN / 10)  # runs here are short
        assert consumer._free_slots() == 3
        consumer._dispatch_all(engine.claim([Q], 3, 30))
        assert wait_until(lambda: now_running == {0, 1})
        assert consumer._ahead.waiting == 1 and consumer._free_slots() == 0
        gates[0].set()  # a slot frees: the waiting run starts in it, no claim needed
        assert wait_until(lambda: len(consumer._finished) == 1)
        consumer._reap()
        consumer._start(consumer._ahead.due(consumer._open_slots(), time.monotonic()))
        assert wait_until(lambda: now_running == {1, 2})
        consumer._flush()
        consumer._dispatch_all(engine.claim([Q], consumer._free_slots(), 30))
        assert consumer._ahead.waiting == 1  # the fourth job waits for a slot
        consumer.cancel(grace=30)
        consumer._shutdown_step()  # released at once, its attempt given back
        waiting = engine.get(ids[3])
        assert waiting is not None and (waiting.state, waiting.attempts) == ("pending", 0)
        assert most == 2
    finally:
        for gate in gates.values():
            gate.set()
        consumer.pool.stop(wait=5)


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_run_claimed_ahead_never_starts_and_its_slot_thread_stays() -> None:
    engine = get_backend("default")
    gate = threading.Event()
    started: list[int] = []

    def handler(job: Any, ctx: Any) -> None:
        started.append(job.payload["i"])
        gate.wait(10)

    for i in range(3):
        queue.enqueue(Q, {"i": i}, backend="default")
    options = WorkerOptions(queues=(Q,), concurrency=2, lease=30, register=False)
    consumer = Consumer(engine, options, handler)
    try:
        consumer._ahead.ran(SHORT_RUN / 10)
        assert consumer._free_slots() == 3
        consumer._dispatch_all(engine.claim([Q], 3, 30))
        assert wait_until(lambda: len(started) == 2)
        [(waiting, _)] = consumer._ahead._waiting
        assert consumer._ahead.waiting == 1
        live = consumer.pool.live
        consumer._interrupt(waiting, JobCancelled, lifecycle.Cancelled())
        consumer._flush()
        assert engine.get(waiting.claimed.job_id).state == "cancelled"  # type: ignore[union-attr]
        assert consumer._ahead.waiting == 0 and consumer.pool.live == live
        gate.set()
        assert wait_until(lambda: len(consumer._finished) == 2)
        assert sorted(started) == [0, 1]  # the cancelled one never ran
    finally:
        gate.set()
        consumer.pool.stop(wait=5)
