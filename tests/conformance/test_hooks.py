"""Hooks and lifecycle signals: one meaning each, sent after the transition committed, in the
process that made it; a raising hook changes nothing (docs/hooks.md)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_blamequeue import BaseJob, JobEvent, audit, queue, signals
from django_blamequeue.backends.base import Backend
from django_blamequeue.testing import capture_events, wait_until

from .support import claim_one, later

KINDS = ("started", "succeeded", "retrying", "failed", "cancelled")


class Seen:
    """Every lifecycle signal sent while a test runs, as (kind, event, sender)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, JobEvent, Any]] = []
        self._lock = threading.Lock()

    def receiver(self, kind: str) -> Callable[..., None]:
        def receive(sender: Any, event: JobEvent, **kwargs: Any) -> None:
            with self._lock:
                self.sent.append((kind, event, sender))

        return receive

    def kinds(self, job_id: str) -> list[str]:
        with self._lock:
            return [k for k, e, _ in self.sent if e.job_id == job_id]

    def of(self, kind: str, job_id: str) -> list[JobEvent]:
        with self._lock:
            return [e for k, e, _ in self.sent if k == kind and e.job_id == job_id]

    def wait(self, job_id: str, kinds: list[str]) -> list[str]:
        """Until the job's signals are ``kinds`` (in order): answer what was seen."""
        wait_until(lambda: self.kinds(job_id) == kinds, timeout=10)
        return self.kinds(job_id)


@pytest.fixture
def seen() -> Iterator[Seen]:
    recorder = Seen()
    connected = []
    for kind in KINDS:
        signal = getattr(signals, f"job_{kind}")
        receiver = recorder.receiver(kind)
        signal.connect(receiver, weak=False)
        connected.append((signal, receiver))
    yield recorder
    for signal, receiver in connected:
        signal.disconnect(receiver)


def consume(definition: Any, backend: str) -> None:
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)


def test_a_retried_then_failed_job_signals_each_retry_and_its_failure_once(
    backend: str, register: Callable[..., Any], configure: Callable[..., None], seen: Seen
) -> None:
    configure(BACKOFF_BASE=0.01, BACKOFF_MAX=0.01)
    hooked: list[tuple[str, int | None, str]] = []

    def on_retry(event: JobEvent) -> None:
        assert isinstance(event.exc, LookupError)
        hooked.append(("retry", event.attempt, event.state))

    def on_failure(event: JobEvent) -> None:
        info = event.info()  # the transition committed before the hook ran
        assert info is not None
        hooked.append(("failure", event.attempt, info.state))

    def always_fails(sku: str) -> None:
        raise LookupError(f"no stock for {sku}")

    definition = register(always_fails, max_attempts=3, on_retry=on_retry, on_failure=on_failure)
    job_id = definition.apply_async(["A-1"], backend=backend).job_id
    consume(definition, backend)
    # job_started comes from the slot thread, the rest from the notifier thread: a short
    # backoff may start the next attempt before its retry's signal is out
    wait_until(lambda: "failed" in seen.kinds(job_id))
    kinds = seen.kinds(job_id)
    assert [k for k in kinds if k != "started"] == ["retrying", "retrying", "failed"]
    assert kinds.count("started") == 3 and kinds[0] == "started"
    wait_until(lambda: len(hooked) == 3)
    assert hooked == [("retry", 1, "pending"), ("retry", 2, "pending"), ("failure", 3, "failed")]
    (failed,) = seen.of("failed", job_id)
    assert (failed.error, failed.error_type, failed.reason) == (
        "LookupError: no stock for A-1",
        "builtins.LookupError",
        "error",
    )
    assert isinstance(failed.exc, LookupError) and failed.args == ("A-1",)
    assert [e.retry_in for e in seen.of("retrying", job_id)] == [0.01, 0.01]
    assert all(sender is definition for _, e, sender in seen.sent if e.job_id == job_id)


def test_a_succeeded_job_signals_once_with_its_result_after_the_commit(
    backend: str, register: Callable[..., Any], seen: Seen
) -> None:
    states: list[str] = []

    def on_success(event: JobEvent) -> None:
        info = event.info()
        assert info is not None
        states.append(info.state)

    def add(a: int, b: int) -> int:
        return a + b

    definition = register(add, on_success=on_success)
    job_id = definition.apply_async([2, 3], backend=backend).job_id
    consume(definition, backend)
    assert seen.wait(job_id, ["started", "succeeded"]) == ["started", "succeeded"]
    (done,) = seen.of("succeeded", job_id)
    assert (done.state, done.result, done.args, done.kwargs) == ("done", 5, (2, 3), {})
    assert wait_until(lambda: states == ["done"])


def test_a_raising_hook_or_receiver_changes_nothing_and_is_logged(
    backend: str,
    register: Callable[..., Any],
    seen: Seen,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken_hook(event: JobEvent) -> None:
        raise RuntimeError("the hook is broken")

    def broken_receiver(sender: Any, event: JobEvent, **kwargs: Any) -> None:
        raise RuntimeError("the receiver is broken")

    def fine(payload: Any) -> str:
        return "ok"

    definition = register(fine, on_success=broken_hook)
    signals.job_succeeded.connect(broken_receiver, weak=False)
    try:
        with caplog.at_level("ERROR", logger="django_blamequeue.hooks"):
            job_id = definition.enqueue({}, backend=backend).job_id
            consume(definition, backend)
            assert seen.wait(job_id, ["started", "succeeded"]) == ["started", "succeeded"]
            assert wait_until(lambda: len(ours(caplog)) == 2)
    finally:
        signals.job_succeeded.disconnect(broken_receiver)
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and (info.state, info.attempts, info.result) == ("done", 1, "ok")
    messages = sorted(r.getMessage() for r in ours(caplog))
    assert "the on_success hook of job" in messages[1] and "stays done" in messages[1]
    assert "a job_succeeded receiver" in messages[0]


def ours(caplog: pytest.LogCaptureFixture) -> list[Any]:
    return [r for r in caplog.records if r.name == "django_blamequeue.hooks"]


def test_job_started_runs_in_the_handlers_thread_before_the_handler(
    backend: str, register: Callable[..., Any]
) -> None:
    local = threading.local()

    def set_up(sender: Any, event: JobEvent, **kwargs: Any) -> None:
        local.job_id = event.job_id

    def reads_it(payload: Any) -> str | None:
        return getattr(local, "job_id", None)

    definition = register(reads_it)
    signals.job_started.connect(set_up, weak=False)
    try:
        handle = definition.enqueue({}, backend=backend)
        consume(definition, backend)
        assert handle.result(timeout=10, poll=0.05) == handle.job_id
    finally:
        signals.job_started.disconnect(set_up)


def test_cancelling_a_waiting_job_and_a_running_one_each_signals_cancelled_once(
    backend: str, register: Callable[..., Any], seen: Seen
) -> None:
    from django_blamequeue import current_job

    started = threading.Event()

    def waits_for_cancel(payload: Any) -> None:
        started.set()
        while not current_job().cancelled:
            current_job().progress(1)
            threading.Event().wait(0.01)

    definition = register(waits_for_cancel)
    waiting = definition.enqueue({}, delay=3600, backend=backend).job_id
    assert queue.cancel(waiting, backend=backend)
    assert seen.wait(waiting, ["cancelled"]) == ["cancelled"]
    running = definition.enqueue({}, backend=backend).job_id
    consume(definition, backend)
    assert started.wait(10)
    queue.cancel(running, backend=backend)
    assert seen.wait(running, ["started", "cancelled"]) == ["started", "cancelled"]
    (event,) = seen.of("cancelled", running)
    assert (event.state, event.name) == ("cancelled", definition.name)


@pytest.mark.requires("supports_time_travel")
def test_a_stalled_job_the_rescuer_fails_runs_its_failure_hook_once_without_an_exception(
    backend: str, engine: Backend, register: Callable[..., Any], seen: Seen
) -> None:
    failures: list[JobEvent] = []

    def never_runs(payload: Any) -> None:  # its worker "dies": only the rescuer acts
        raise AssertionError("not run")

    definition = register(never_runs, max_attempts=1, on_failure=failures.append)
    job_id = definition.enqueue({}, backend=backend).job_id
    claim_one(engine, definition.queue, lease=1)
    with capture_events() as events:
        engine.rescue_expired(later(engine, 60), 100)
        assert events.wait_for_action(audit.STALLED, job_id=job_id)
    assert seen.wait(job_id, ["failed"]) == ["failed"]
    (event,) = failures
    assert (event.state, event.reason, event.exc, event.name) == (
        "failed",
        "stalled",
        None,
        definition.name,
    )


class Audited(BaseJob):
    """A project's base class: every job it wraps counts its runs and reports failures."""

    runs: list[str] = []
    failures: list[tuple[str, str | None]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        Audited.runs.append(type(self).__qualname__)
        return super().__call__(*args, **kwargs)

    def on_failure(self, event: JobEvent) -> None:
        Audited.failures.append((event.job_id, event.error_type))


def test_a_base_class_wraps_function_jobs_and_class_jobs_alike(
    backend: str, register: Callable[..., Any]
) -> None:
    Audited.runs.clear()
    Audited.failures.clear()

    def double(n: int) -> int:
        return 2 * n

    class Refund(Audited):
        def run(self, order: int) -> None:
            raise PermissionError(f"order {order} was never paid")

    doubling = register(double, base=Audited)
    refund = register(Refund, queue=doubling.queue, max_attempts=1)
    first = doubling.apply_async([21], backend=backend)
    second = refund.apply_async([7], backend=backend)
    consume(doubling, backend)
    assert first.result(timeout=10, poll=0.05) == 42
    assert second.wait(timeout=10, poll=0.05).state == "failed"
    assert wait_until(lambda: len(Audited.failures) == 1)
    assert sorted(Audited.runs) == sorted([double.__qualname__, Refund.__qualname__])
    assert Audited.failures == [(second.job_id, "builtins.PermissionError")]
    assert doubling(4) == 8  # a direct call runs the wrapped function, wrapper included
