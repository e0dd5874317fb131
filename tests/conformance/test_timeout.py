"""Timeout: past ``@job(timeout=…)`` the attempt fails with reason ``timeout`` and the
slot is freed for the next job."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_blamequeue import queue
from django_blamequeue.audit import DLQ_WRITE
from django_blamequeue.testing import capture_events, wait_until


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Lets stuck handler threads go at the end of the test."""
    event = threading.Event()
    yield event
    event.set()


def test_a_handler_past_its_timeout_fails_the_attempt_with_reason_timeout(
    backend: str, register: Callable[..., Any], release: threading.Event
) -> None:
    def slow(payload: Any) -> None:
        release.wait(30)

    definition = register(slow, timeout=0.3, max_attempts=1)
    job_id = definition.enqueue({}, backend=backend).job_id
    started = time.monotonic()
    with capture_events() as events:
        queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
        assert events.wait_for_action(DLQ_WRITE, job_id=job_id, timeout=10)
    elapsed = time.monotonic() - started
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and (info.state, info.reason) == ("failed", "timeout")
    assert info.error and "timeout" in info.error
    assert 0.3 <= elapsed < 5


def test_a_timed_out_attempt_with_attempts_left_is_retried(
    backend: str,
    register: Callable[..., Any],
    release: threading.Event,
    configure: Callable[..., None],
) -> None:
    configure(BACKOFF_BASE=0.01, BACKOFF_MAX=0.01)
    attempts: list[int] = []

    def slow_then_quick(payload: Any) -> str:
        from django_blamequeue import current_job

        attempts.append(current_job().attempt)
        if len(attempts) == 1:
            release.wait(30)
        return "ok"

    definition = register(slow_then_quick, timeout=0.3, max_attempts=2)
    job_id = definition.enqueue({}, backend=backend).job_id
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: queue.get_job(job_id, backend=backend).state == "done", 10)  # type: ignore[union-attr]
    assert attempts == [1, 2]


def test_the_slot_of_a_timed_out_handler_is_freed_for_the_next_job(
    backend: str, register: Callable[..., Any], release: threading.Event
) -> None:
    """Concurrency 1 and a handler stuck in a C call that no interrupt can reach: the next job
    still runs, while the stuck thread has not returned."""
    order: list[str] = []

    def stuck_or_quick(payload: Any) -> str:
        order.append(payload)
        if payload == "stuck":
            release.wait(30)
        return payload

    definition = register(stuck_or_quick, timeout=0.3, max_attempts=1)
    stuck = definition.enqueue("stuck", backend=backend, priority=1).job_id
    quick = definition.enqueue("quick", backend=backend).job_id
    queue.consume(definition.queue, None, backend=backend, concurrency=1, poll_interval=0.05)
    assert wait_until(lambda: queue.get_job(quick, backend=backend).state == "done", 10)  # type: ignore[union-attr]
    assert not release.is_set(), "the stuck handler is still inside its call"
    assert order == ["stuck", "quick"]
    info = queue.get_job(stuck, backend=backend)
    assert info is not None and (info.state, info.reason) == ("failed", "timeout")


def test_a_pure_python_handler_is_interrupted_at_its_timeout(
    backend: str, register: Callable[..., Any]
) -> None:
    ticks: list[float] = []

    def spins(payload: Any) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ticks.append(time.monotonic())
            time.sleep(0.01)

    definition = register(spins, timeout=0.3, max_attempts=1)
    job_id = definition.enqueue({}, backend=backend).job_id
    with capture_events() as events:
        queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
        assert events.wait_for_action(DLQ_WRITE, job_id=job_id, timeout=10)
    count = len(ticks)
    time.sleep(0.2)  # a handler still running would tick ~20 more times meanwhile
    assert len(ticks) <= count + 1  # at most the tick in progress when the interrupt landed
    assert ticks[-1] - ticks[0] < 2
