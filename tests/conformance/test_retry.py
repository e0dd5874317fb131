"""Retry: backoff ``min(base · 2^(n-1), max)``; exhausted → DLQ with error and traceback;
``Unrecoverable`` or a ``retryable`` predicate answering False skip the budget; a predicate
that raises counts as retryable."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django_blamequeue import Unrecoverable, queue
from django_blamequeue.audit import CONSUME_FAILURE, DLQ_WRITE
from django_blamequeue.backends.base import Backend
from django_blamequeue.testing import capture_events

from .support import row


def consume(definition: Any, backend: str) -> None:
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)


def test_a_failed_attempt_with_attempts_left_waits_the_backoff(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(BACKOFF_BASE=30, BACKOFF_MAX=300)

    def flaky(payload: Any) -> None:
        raise ValueError("try again")

    definition = register(flaky, max_attempts=3)
    job_id = definition.enqueue({}, backend=backend).job_id
    before = engine.now()
    with capture_events() as events:
        consume(definition, backend)
        assert events.wait_for_action(CONSUME_FAILURE, job_id=job_id)
    after = engine.now()
    r = row(engine, job_id)
    assert (r["state"], r["attempts"], r["reason"]) == ("pending", 1, "error")
    assert r["error"] == "ValueError: try again"
    # due 30 s after the failed attempt was acked, on the engine's clock
    assert before + timedelta(seconds=30) <= r["available_at"] <= after + timedelta(seconds=30)
    assert events.of(CONSUME_FAILURE)[0].data["retry_in"] == 30.0


def test_retries_back_off_exponentially_up_to_the_max_then_go_to_the_dlq(
    backend: str, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(BACKOFF_BASE=0.05, BACKOFF_MAX=0.15)
    seen: list[int] = []

    def always_fails(payload: Any) -> None:
        from django_blamequeue import current_job

        seen.append(current_job().attempt)
        raise ValueError(f"attempt {seen[-1]} failed")

    definition = register(always_fails, max_attempts=5)
    job_id = definition.enqueue({}, backend=backend).job_id
    with capture_events() as events:
        consume(definition, backend)
        assert events.wait_for_action(DLQ_WRITE, job_id=job_id)
    delays = [e.data.get("retry_in") for e in events.of(CONSUME_FAILURE)]
    assert delays == [0.05, 0.1, 0.15, 0.15, None]
    assert seen == [1, 2, 3, 4, 5]


def test_an_exhausted_job_lands_in_the_dlq_with_its_error_and_traceback(
    backend: str, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(BACKOFF_BASE=0.01, BACKOFF_MAX=0.01)

    def broken_handler(payload: Any) -> None:
        raise KeyError("missing")

    definition = register(broken_handler, max_attempts=2)
    job_id = definition.enqueue({"n": 1}, backend=backend).job_id
    with capture_events() as events:
        consume(definition, backend)
        assert events.wait_for_action(DLQ_WRITE, job_id=job_id)
    info = queue.get_job(job_id, backend=backend)
    assert info is not None
    assert (info.state, info.attempts, info.reason) == ("failed", 2, "error")
    assert info.error == "KeyError: 'missing'"
    assert info.traceback and "Traceback" in info.traceback and "broken_handler" in info.traceback
    assert info.finished_at is not None
    assert [j.job_id for j in queue.dlq_list(definition.queue, backend=backend)] == [job_id]


def test_unrecoverable_skips_the_remaining_budget(
    backend: str, register: Callable[..., Any]
) -> None:
    runs: list[int] = []

    def hopeless(payload: Any) -> None:
        runs.append(1)
        raise Unrecoverable("the address does not exist")

    definition = register(hopeless, max_attempts=10)
    job_id = definition.enqueue({}, backend=backend).job_id
    with capture_events() as events:
        consume(definition, backend)
        assert events.wait_for_action(DLQ_WRITE, job_id=job_id)
    info = queue.get_job(job_id, backend=backend)
    assert info is not None
    assert (info.state, info.attempts, info.reason) == ("failed", 1, "unrecoverable")
    assert info.error == "Unrecoverable: the address does not exist"
    assert runs == [1]


def test_a_retryable_predicate_answering_false_skips_the_remaining_budget(
    backend: str, register: Callable[..., Any]
) -> None:
    asked: list[BaseException] = []

    def retryable(exc: BaseException) -> bool:
        asked.append(exc)
        return not isinstance(exc, PermissionError)

    def forbidden(payload: Any) -> None:
        raise PermissionError("403")

    definition = register(forbidden, max_attempts=10, retryable=retryable)
    job_id = definition.enqueue({}, backend=backend).job_id
    with capture_events() as events:
        consume(definition, backend)
        assert events.wait_for_action(DLQ_WRITE, job_id=job_id)
    info = queue.get_job(job_id, backend=backend)
    assert info is not None
    assert (info.state, info.attempts, info.reason) == ("failed", 1, "not_retryable")
    assert [type(e) for e in asked] == [PermissionError]


def test_a_retryable_predicate_that_raises_counts_as_retryable(
    backend: str, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(BACKOFF_BASE=0.01, BACKOFF_MAX=0.01)

    def buggy_predicate(exc: BaseException) -> bool:
        raise RuntimeError("predicate bug")

    attempts: list[int] = []

    def fails_once(payload: Any) -> str:
        from django_blamequeue import current_job

        attempts.append(current_job().attempt)
        if len(attempts) == 1:
            raise ConnectionError("flaky network")
        return "second time lucky"

    definition = register(fails_once, max_attempts=3, retryable=buggy_predicate)
    job_id = definition.enqueue({}, backend=backend).job_id
    consume(definition, backend)
    from django_blamequeue.testing import wait_until

    assert wait_until(lambda: queue.get_job(job_id, backend=backend).state == "done", 10)  # type: ignore[union-attr]
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and (info.attempts, info.result) == (2, "second time lucky")
    assert attempts == [1, 2]
