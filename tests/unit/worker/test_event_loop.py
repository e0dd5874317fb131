"""event_loop: ``async def`` handlers as tasks on one consumer's event loop thread — each
with its own ``current_job()``, stopped by cancelling its task (``TaskGuard``), never
reported once the worker took the decision, and the loop started only when needed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from django_blamequeue import current_job
from django_blamequeue.core import lifecycle
from django_blamequeue.exceptions import JobTimeout, WorkerShutdown
from django_blamequeue.serializers import decode
from django_blamequeue.worker.event_loop import EventLoop, TaskGuard
from django_blamequeue.worker.execution import Run
from tests.unit.worker.test_parts import run

WAIT = 10.0


class Reports:
    """The runs the loop reported, with a wait on their number."""

    def __init__(self) -> None:
        self.runs: list[Run] = []
        self.cond = threading.Condition()

    def __call__(self, r: Run) -> None:
        with self.cond:
            self.runs.append(r)
            self.cond.notify_all()

    def wait_for(self, n: int) -> list[Run]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.runs) >= n, WAIT), self.runs
            return list(self.runs)


@pytest.fixture
def reports() -> Reports:
    return Reports()


@pytest.fixture
def loops() -> Iterator[list[EventLoop]]:
    made: list[EventLoop] = []
    yield made
    for loop in made:
        loop.stop()


def loop_of(loops: list[EventLoop], handler: Any, reports: Reports) -> EventLoop:
    loop = EventLoop(handler, reports)
    loops.append(loop)
    return loop


def result_of(r: Run) -> Any:
    assert isinstance(r.outcome, lifecycle.Succeeded), r.outcome
    assert r.outcome.result is not None
    return decode(
        r.outcome.result.content_type, r.outcome.result.content_encoding, r.outcome.result.body
    )


def test_no_loop_thread_starts_until_the_first_async_run(
    loops: list[EventLoop], reports: Reports
) -> None:
    async def handler(job: Any, ctx: Any) -> None:
        return None

    loop = loop_of(loops, handler, reports)
    loop.submit_many([])
    assert not loop.running
    loop.submit_many([run("first")])
    reports.wait_for(1)
    assert loop.running


def test_an_async_run_reports_its_result_with_its_own_current_job(
    loops: list[EventLoop], reports: Reports
) -> None:
    async def handler(job: Any, ctx: Any) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {
            "job": job.job_id,
            "current": current_job().job_id,
            "same": current_job() is ctx,
            "thread": threading.current_thread().name,
        }

    r = run("a1")
    loop_of(loops, handler, reports).submit_many([r])
    assert reports.wait_for(1) == [r]
    assert isinstance(r.guard, TaskGuard)
    assert result_of(r) == {"job": "a1", "current": "a1", "same": True, "thread": "blamequeue-loop"}


def test_runs_interleave_on_the_one_loop_and_each_keeps_its_own_current_job(
    loops: list[EventLoop], reports: Reports
) -> None:
    both_started = asyncio.Event()
    started: list[str] = []

    async def handler(job: Any, ctx: Any) -> list[str]:
        seen = [current_job().job_id]
        started.append(job.job_id)
        if len(started) == 2:
            both_started.set()
        await asyncio.wait_for(both_started.wait(), WAIT)  # each waits for the other
        seen.append(current_job().job_id)
        return seen

    a, b = run("a"), run("b")
    loop_of(loops, handler, reports).submit_many([a, b])
    reports.wait_for(2)
    assert (result_of(a), result_of(b)) == (["a", "a"], ["b", "b"])


def test_the_worker_stops_a_run_by_cancelling_its_task_and_nothing_is_reported(
    loops: list[EventLoop], reports: Reports
) -> None:
    entered = threading.Event()
    unwound = threading.Event()
    reasons: list[str] = []

    async def handler(job: Any, ctx: Any) -> None:
        entered.set()
        try:
            await asyncio.sleep(WAIT)
        except asyncio.CancelledError as exc:
            reasons.append(str(exc))
            unwound.set()
            raise

    r = run("slow")
    loop = loop_of(loops, handler, reports)
    loop.submit_many([r])
    assert entered.wait(WAIT)
    assert r.abandon(JobTimeout)  # the worker's decision: its task is cancelled
    assert unwound.wait(WAIT)
    assert reasons == ["timeout"]  # cancelled with the interrupt's reason
    loop.stop()  # joins the loop thread: the run's task is over
    assert not loop.running
    assert reports.runs == [] and r.outcome is None


def test_a_cancelled_error_the_handler_raises_itself_is_its_own_failure(
    loops: list[EventLoop], reports: Reports
) -> None:
    async def handler(job: Any, ctx: Any) -> None:
        raise asyncio.CancelledError("the handler's own")

    r = run("own")
    loop_of(loops, handler, reports).submit_many([r])
    reports.wait_for(1)
    assert isinstance(r.outcome, lifecycle.Raised)
    assert isinstance(r.outcome.exc, asyncio.CancelledError)


def test_a_handlers_system_exit_is_its_failure_and_the_loop_runs_on(
    loops: list[EventLoop], reports: Reports
) -> None:
    async def handler(job: Any, ctx: Any) -> str:
        if job.job_id == "exits":
            raise SystemExit(3)
        return "still here"

    exits, after = run("exits"), run("after")
    loop = loop_of(loops, handler, reports)
    loop.submit_many([exits])
    reports.wait_for(1)
    loop.submit_many([after])
    reports.wait_for(2)
    assert isinstance(exits.outcome, lifecycle.Raised)
    assert isinstance(exits.outcome.exc, SystemExit)
    assert result_of(after) == "still here" and loop.running


def test_a_run_stopped_before_its_task_started_never_runs(
    loops: list[EventLoop], reports: Reports
) -> None:
    called: list[str] = []

    async def handler(job: Any, ctx: Any) -> None:
        called.append(job.job_id)

    stopped, ran = run("stopped"), run("ran")
    assert stopped.abandon(WorkerShutdown)
    loop = loop_of(loops, handler, reports)
    loop.submit_many([stopped, ran])
    assert reports.wait_for(1) == [ran]
    loop.stop()
    assert called == ["ran"] and reports.runs == [ran]


def test_stopping_the_loop_cancels_what_is_left_and_closes_it(
    loops: list[EventLoop], reports: Reports
) -> None:
    entered = threading.Event()
    unwound: list[str] = []

    async def handler(job: Any, ctx: Any) -> None:
        entered.set()
        try:
            await asyncio.sleep(WAIT)
        finally:
            unwound.append(job.job_id)

    left = run("left")
    loop = loop_of(loops, handler, reports)
    loop.submit_many([left])
    assert entered.wait(WAIT)
    loop.stop()
    assert not loop.running and unwound == ["left"]
    assert left.guard.interrupt(JobTimeout) is False  # the loop is closed: nothing to cancel
