"""Circuit breaker and retry wrapper: open after repeated failures, half-open later."""

from __future__ import annotations

import pytest
from django.db import OperationalError

from django_blamequeue.backends.resilience import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    CircuitBreaker,
    Resilience,
)
from django_blamequeue.exceptions import ErrorCode, QueueError


class FakeBackend:
    alias = "fake"
    unavailable_errors = (OperationalError,)

    def __init__(self) -> None:
        self.dropped = 0

    def on_unavailable(self) -> None:
        self.dropped += 1


def failing() -> int:
    raise OperationalError("server closed the connection")


def test_breaker_opens_after_threshold_consecutive_failures() -> None:
    b = CircuitBreaker("x", threshold=3, reset_after=60)
    for _ in range(2):
        b.failure()
    assert b.state == CLOSED
    b.failure()
    assert b.state == OPEN
    with pytest.raises(QueueError) as err:
        b.before()
    assert err.value.code == ErrorCode.BACKEND_UNAVAILABLE


def test_breaker_half_opens_after_reset_and_closes_on_success() -> None:
    b = CircuitBreaker("x", threshold=1, reset_after=0.0)
    b.failure()
    assert b.state == HALF_OPEN  # reset_after elapsed at once
    b.before()  # a trial call is let through
    b.success()
    assert b.state == CLOSED


def test_a_success_resets_the_failure_count() -> None:
    b = CircuitBreaker("x", threshold=2, reset_after=60)
    b.failure()
    b.success()
    b.failure()
    assert b.state == CLOSED


def test_engine_errors_become_backend_unavailable_and_drop_the_connection() -> None:
    backend = FakeBackend()
    r = Resilience(backend, retries=0)  # type: ignore[arg-type]
    with pytest.raises(QueueError) as err:
        r.call(failing)
    assert err.value.code == ErrorCode.BACKEND_UNAVAILABLE
    assert backend.dropped == 1


def test_idempotent_calls_are_retried_and_others_are_not() -> None:
    backend = FakeBackend()
    r = Resilience(backend, retries=2, retry_delay=0)  # type: ignore[arg-type]
    calls = {"n": 0}

    def flaky() -> str:
        calls["n"] += 1
        if calls["n"] < 3:
            raise OperationalError("blip")
        return "ok"

    assert r.call(flaky, idempotent=True) == "ok"
    assert calls["n"] == 3
    calls["n"] = 0
    with pytest.raises(QueueError):
        r.call(flaky)
    assert calls["n"] == 1


def test_an_open_breaker_fails_fast_without_calling_the_engine() -> None:
    backend = FakeBackend()
    r = Resilience(backend, retries=0)  # type: ignore[arg-type]
    for _ in range(r.breaker.threshold):
        with pytest.raises(QueueError):
            r.call(failing)
    called = []
    with pytest.raises(QueueError, match="circuit open"):
        r.call(lambda: called.append(1))
    assert called == []


def test_an_open_breaker_lets_a_probe_through_once_its_interval_passed_since_the_failure() -> None:
    b = CircuitBreaker("x", threshold=1, reset_after=60)
    b.failure()
    with pytest.raises(QueueError):
        b.before(probe_after=30)  # too soon: still refused without a call
    b.before(probe_after=0.0)  # a worker polling that often tries its engine again
    assert b.state == OPEN  # until the trial answers
    b.success()
    assert b.state == CLOSED
