"""What a Celery user reaches for, on every backend — ``.delay(...)`` with
positional and keyword arguments, ``countdown``/``eta``, a result handle that polls the
backend and is honest about states, per-job backoff, and ``Retry`` from inside a handler."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from django_blamequeue import (
    JobFailed,
    JobWasCancelled,
    ResultTimeout,
    Retry,
    current_job,
    queue,
)
from django_blamequeue.audit import CONSUME_FAILURE
from django_blamequeue.backends.base import Backend
from django_blamequeue.exceptions import ErrorCode
from django_blamequeue.testing import capture_events

from .support import row


def work(definition: Any, backend: str) -> None:
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)


def test_delay_calls_the_handler_with_its_arguments_and_result_answers_its_value(
    backend: str, register: Callable[..., Any]
) -> None:
    def send_welcome(user_id: int, lang: str = "en", *, tags: tuple[str, ...] = ()) -> Any:
        return {"user": user_id, "lang": lang, "tags": list(tags), "job": current_job().name}

    definition = register(send_welcome, backend=backend)
    handle = definition.delay(42, lang="de", tags=["new"])
    assert handle.info() is not None and handle.info().state == "pending"  # type: ignore[union-attr]
    work(definition, backend)
    assert handle.result(timeout=30) == {
        "user": 42,
        "lang": "de",
        "tags": ["new"],
        "job": definition.name,
    }
    assert handle.wait(timeout=1).state == "done"


def test_result_raises_job_failed_with_the_error_when_the_job_ends_in_the_dlq(
    backend: str, register: Callable[..., Any]
) -> None:
    def broken(order_id: int) -> None:
        raise ValueError(f"order {order_id} is gone")

    definition = register(broken, max_attempts=1, backend=backend)
    handle = definition.apply_async(args=[7])
    work(definition, backend)
    with pytest.raises(JobFailed) as caught:
        handle.result(timeout=30)
    assert caught.value.code == ErrorCode.JOB_FAILED
    assert "failed after 1/1 attempt(s) (error): ValueError: order 7 is gone" in str(caught.value)
    assert caught.value.info.traceback  # type: ignore[attr-defined]


def test_result_raises_job_was_cancelled_and_a_timeout_names_the_state(
    backend: str, register: Callable[..., Any]
) -> None:
    definition = register(lambda payload: payload, backend=backend)
    later = definition.enqueue({}, countdown=600)
    with pytest.raises(ResultTimeout) as caught:
        later.result(timeout=0.2, poll=0.05)
    assert caught.value.code == ErrorCode.RESULT_TIMEOUT and caught.value.state == "pending"
    assert f"job {later.job_id} ({definition.name}) is still pending after 0.2 s" in str(
        caught.value
    )
    assert queue.cancel(later.job_id, backend=backend)
    with pytest.raises(JobWasCancelled) as cancelled:
        later.result(timeout=5)
    assert cancelled.value.code == ErrorCode.JOB_CANCELLED


def test_countdown_and_eta_are_delay_and_run_at(
    backend: str, engine: Backend, register: Callable[..., Any]
) -> None:
    definition = register(lambda payload: None, backend=backend)
    before = engine.now()
    by_countdown = definition.enqueue({}, countdown=300)
    by_eta = definition.apply_async(kwargs={"a": 1}, eta=before + timedelta(hours=1))
    assert row(engine, by_countdown.job_id)["available_at"] >= before + timedelta(seconds=299)
    eta = row(engine, by_eta.job_id)["available_at"]
    assert abs((eta - (before + timedelta(hours=1))).total_seconds()) < 1
    for options in ({"countdown": 1, "delay": 1}, {"eta": before, "run_at": before}):
        with pytest.raises(Exception) as caught:
            definition.enqueue({}, **options)
        assert getattr(caught.value, "code", None) == ErrorCode.BAD_ARGUMENT


def test_retry_from_a_handler_comes_back_after_its_delay_and_a_jobs_backoff_wins(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(BACKOFF_BASE=1, BACKOFF_MAX=300)

    def later(payload: Any) -> None:
        current_job().retry(45, reason="rate limited")

    def flaky(payload: Any) -> None:
        raise ValueError("try again")

    retrying = register(later, max_attempts=3, backend=backend)
    backing_off = register(
        flaky, max_attempts=3, backoff_base=30, queue=retrying.queue, backend=backend
    )
    asked = retrying.enqueue({}).job_id
    failed = backing_off.enqueue({}).job_id
    before = engine.now()
    with capture_events() as events:
        work(retrying, backend)
        assert events.wait_for_action(CONSUME_FAILURE, count=2, timeout=30)
    after = engine.now()
    for job_id, delay, error in (
        (asked, 45, "Retry: retry requested in 45 s: rate limited"),
        (failed, 30, "ValueError: try again"),
    ):
        r = row(engine, job_id)
        assert (r["state"], r["attempts"], r["error"]) == ("pending", 1, error)
        assert before + timedelta(seconds=delay) <= r["available_at"]
        assert r["available_at"] <= after + timedelta(seconds=delay)


def test_raise_retry_on_the_last_attempt_moves_the_job_to_the_dlq(
    backend: str, register: Callable[..., Any]
) -> None:
    def again(payload: Any) -> None:
        raise Retry(delay=0)

    definition = register(again, max_attempts=2, backend=backend)
    handle = definition.enqueue({})
    work(definition, backend)
    with pytest.raises(
        JobFailed, match=r"2/2 attempt\(s\) \(error\): Retry: retry requested in 0 s"
    ):
        handle.result(timeout=30)
