"""Cancel: waiting jobs are cancelled at once; a running one is told and interrupted;
cancellation wins over a shutdown release; terminal jobs answer False."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from django_blamequeue import queue
from django_blamequeue.audit import CANCEL, CANCEL_REQUESTED
from django_blamequeue.backends.base import Backend
from django_blamequeue.core import lifecycle
from django_blamequeue.exceptions import JobCancelled
from django_blamequeue.testing import capture_events, wait_until

from .support import ack, claim_one, fail, outcome, row, succeed


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def state(job_id: str, backend: str) -> str | None:
    info = queue.get_job(job_id, backend=backend)
    return info.state if info else None


def test_a_pending_job_is_cancelled_at_once(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("c", {}, backend=backend).job_id
    with capture_events() as events:
        assert queue.cancel(job_id, backend=backend) is True
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and (info.state, info.reason) == ("cancelled", "cancelled")
    assert info.finished_at is not None
    assert [(e.action, e.job_id) for e in events.events] == [(CANCEL, job_id)]
    assert engine.claim(["c"], 10, 30) == []


def test_a_delayed_job_is_cancelled_at_once(backend: str) -> None:
    job_id = queue.enqueue("c", {}, delay=3600, backend=backend).job_id
    assert queue.cancel(job_id, backend=backend) is True
    assert state(job_id, backend) == "cancelled"


def test_a_blocked_job_is_cancelled_at_once(backend: str) -> None:
    flow = queue.enqueue_flow(
        "c", [{"name": "a"}, {"name": "b", "depends_on": ["a"]}], backend=backend
    )
    ids = {j["name"]: j["job_id"] for j in flow["jobs"]}
    assert state(ids["b"], backend) == "blocked"
    assert queue.cancel(ids["b"], backend=backend) is True
    assert (state(ids["a"], backend), state(ids["b"], backend)) == ("pending", "cancelled")


def test_a_running_job_is_told_interrupted_and_ends_cancelled(backend: str) -> None:
    running = threading.Event()
    saw: dict[str, Any] = {}

    def handler(job: Any, ctx: Any) -> None:
        running.set()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                time.sleep(0.01)
        except BaseException as exc:
            saw["exception"] = type(exc)
            saw["cancelled"] = ctx.cancelled
            raise

    job_id = queue.enqueue("c", {}, backend=backend).job_id
    queue.consume("c", handler, backend=backend, poll_interval=0.05)
    assert running.wait(10)
    with capture_events() as events:
        assert queue.cancel(job_id, backend=backend) is True
        assert events.wait_for_action(CANCEL, job_id=job_id, timeout=10)
    assert [e.action for e in events.events] == [CANCEL_REQUESTED, CANCEL]
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and (info.state, info.reason) == ("cancelled", "cancelled")
    assert wait_until(lambda: len(saw) == 2, 5)
    assert saw == {"exception": JobCancelled, "cancelled": True}


def test_a_running_handler_can_see_ctx_cancelled_without_being_interrupted(
    backend: str, release: threading.Event
) -> None:
    """A handler stuck in a C call cannot be interrupted; it can still poll ``ctx.cancelled``,
    and the job is cancelled without waiting for it."""
    contexts: list[Any] = []

    def handler(job: Any, ctx: Any) -> None:
        contexts.append(ctx)
        release.wait(30)

    job_id = queue.enqueue("c", {}, backend=backend).job_id
    queue.consume("c", handler, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: bool(contexts), 10)
    assert contexts[0].cancelled is False
    assert queue.cancel(job_id, backend=backend)
    assert wait_until(lambda: state(job_id, backend) == "cancelled", 10)
    assert contexts[0].cancelled is True
    assert not release.is_set()


def test_cancel_wins_over_a_shutdown_release(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("c", {}, backend=backend).job_id
    c = claim_one(engine, "c")
    assert queue.cancel(job_id, backend=backend) is True
    assert row(engine, job_id)["state"] == "inflight"  # running: only requested
    result = ack(engine, c, outcome(c, lifecycle.Released()))
    assert (result.ok, result.state) == (True, "cancelled")
    assert row(engine, job_id)["state"] == "cancelled"


def test_cancel_wins_over_a_worker_shutting_down(backend: str, release: threading.Event) -> None:
    running = threading.Event()

    def handler(job: Any, ctx: Any) -> None:
        running.set()
        release.wait(30)

    job_id = queue.enqueue("c", {}, backend=backend).job_id
    consumer = queue.consume("c", handler, backend=backend, poll_interval=0.05)
    assert running.wait(10)
    assert queue.cancel(job_id, backend=backend)
    consumer.cancel(grace=0)
    assert consumer.join(10)
    assert state(job_id, backend) == "cancelled"


def test_a_success_that_races_a_cancel_request_stays_done(backend: str, engine: Backend) -> None:
    """The work was done: a cancel that arrives during the last instant does not undo it."""
    job_id = queue.enqueue("c", {}, backend=backend).job_id
    c = claim_one(engine, "c")
    assert queue.cancel(job_id, backend=backend)
    assert succeed(engine, c).state == "done"


@pytest.mark.parametrize("final", ["done", "failed", "cancelled"])
def test_a_terminal_job_is_not_cancellable(backend: str, engine: Backend, final: str) -> None:
    job_id = queue.enqueue("c", {}, max_attempts=1, backend=backend).job_id
    if final == "cancelled":
        assert queue.cancel(job_id, backend=backend)
    else:
        c = claim_one(engine, "c")
        assert (succeed(engine, c) if final == "done" else fail(engine, c)).state == final
    before = row(engine, job_id)
    assert queue.cancel(job_id, backend=backend) is False
    assert row(engine, job_id) == before


def test_cancelling_an_unknown_job_answers_false(backend: str) -> None:
    assert queue.cancel("01ZZZZZZZZZZZZZZZZZZZZZZZZ", backend=backend) is False
