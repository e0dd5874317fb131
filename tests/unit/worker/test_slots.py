"""The slot pool: threads started only as runs need them, every run started at once while
threads are free (short runs or long), an abandoned run's thread no longer counted, and a
stop that lets every thread go."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from django_blamequeue.exceptions import JobTimeout
from django_blamequeue.worker.execution import Run
from django_blamequeue.worker.slots import SlotPool
from tests.unit.worker.test_parts import run

WAIT = 10.0


class Reports:
    def __init__(self) -> None:
        self.done: list[str] = []
        self.cond = threading.Condition()

    def __call__(self, r: Run) -> None:
        with self.cond:
            self.done.append(r.claimed.job_id)
            self.cond.notify_all()

    def wait_for(self, n: int) -> list[str]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.done) >= n, WAIT), self.done
            return list(self.done)


def pool_of(size: int, handler: Callable[[Any, Any], Any]) -> tuple[SlotPool, Reports]:
    reports = Reports()
    return SlotPool(size, handler, reports), reports


def slot_threads() -> int:
    return sum(t.name == "blamequeue-slot" for t in threading.enumerate())


def wait_until(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.001)


def test_threads_start_only_as_runs_need_them_and_stop_lets_them_all_go() -> None:
    before = slot_threads()
    pool, reports = pool_of(8, lambda job, ctx: None)
    assert pool.live == 0 and slot_threads() == before
    for i in range(50):  # one at a time: the thread parked after a run takes the next
        pool.submit(run(f"j{i}"))
        reports.wait_for(i + 1)
        wait_until(lambda: len(pool._parked) == 1)
    assert pool.live == 1
    pool.stop()
    wait_until(lambda: pool.live == 0 and slot_threads() == before)


def test_blocking_runs_all_start_at_once_up_to_the_size() -> None:
    size = 6
    started = threading.Barrier(size + 1)  # every run must be running at the same time
    release = threading.Event()

    def handler(job: Any, ctx: Any) -> None:
        if job.job_id != "warm":
            started.wait(WAIT)
            release.wait(WAIT)

    pool, reports = pool_of(size, handler)
    pool.submit_many([run("warm")])  # a first thread, parked again once its run is done
    reports.wait_for(1)
    wait_until(lambda: len(pool._parked) == 1)
    pool.submit_many([run(f"j{i}") for i in range(size)])  # the parked one, woken, and new
    started.wait(WAIT)  # raises BrokenBarrierError if a run waited behind another
    assert pool.live == size
    release.set()
    assert sorted(reports.wait_for(size + 1)) == sorted(["warm", *(f"j{i}" for i in range(size))])
    pool.stop()
    wait_until(lambda: pool.live == 0)


def test_runs_queued_while_every_thread_is_busy_wake_parked_threads_in_a_chain() -> None:
    pool, reports = pool_of(4, lambda job, ctx: None)
    pool.submit_many([run(f"w{i}") for i in range(4)])
    reports.wait_for(4)
    wait_until(lambda: len(pool._parked) == pool.live)  # every thread parked again
    gate = threading.Barrier(pool.live + 1)

    def handler(job: Any, ctx: Any) -> None:
        gate.wait(WAIT)

    pool.handler = handler
    pool.submit_many([run(f"j{i}") for i in range(pool.live)])
    gate.wait(WAIT)  # one wake from the submitter, the rest from the chain
    reports.wait_for(4 + pool.live)
    pool.stop()
    wait_until(lambda: pool.live == 0)


def test_an_abandoned_runs_thread_no_longer_counts_and_exits_when_its_handler_returns() -> None:
    entered = threading.Event()
    stuck = threading.Event()

    def handler(job: Any, ctx: Any) -> None:
        if job.job_id == "stuck":
            entered.set()
            while not stuck.is_set():  # pure Python: the interrupt lands here
                time.sleep(0.001)

    pool, reports = pool_of(1, handler)
    stuck_run = run("stuck")
    pool.submit(stuck_run)
    assert entered.wait(WAIT)
    assert stuck_run.abandon(JobTimeout)
    pool.replace_one()
    assert pool.live == 0
    pool.submit(run("next"))  # a new thread, though the size is 1
    assert reports.wait_for(1) == ["next"]  # the abandoned run never reports
    stuck.set()
    pool.stop()
    wait_until(lambda: pool.live == 0)
