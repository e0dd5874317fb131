"""Errors as data: each attempt's error keeps its exception's class path (``JobInfo.error_type``,
and per attempt in the audit trail); a job that ends done has no current error, while the
trail keeps every failed attempt's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from django_blamequeue import audit, queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.core import lifecycle
from django_blamequeue.core.records import AckResult, Claimed
from django_blamequeue.testing import capture_events

from .support import ack, claim_one, later, outcome, succeed

AT_ONCE = lifecycle.Policy(backoff_base=0, backoff_max=0)  # a retry due now (SQS too)


def fail(engine: Backend, c: Claimed, exc: BaseException) -> AckResult:
    """The attempt raised ``exc``; a retry is due at once."""
    decided = lifecycle.decide(
        lifecycle.Raised(exc, "Traceback: ..."),
        attempt=c.attempt,
        max_attempts=c.max_attempts,
        policy=AT_ONCE,
    )
    return ack(engine, c, decided)


class PaymentDeclined(Exception):
    """A project's own exception, matched by class as pretix matches expected errors."""


DECLINED = f"{__name__}.PaymentDeclined"


def test_each_failed_attempt_keeps_its_exception_class_path(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("errors", {}, max_attempts=3, backend=backend).job_id
    with capture_events() as events:
        fail(engine, claim_one(engine, "errors"), ConnectionError("refused"))
        info = queue.get_job(job_id, backend=backend)
        assert info is not None
        assert (info.state, info.error, info.error_type) == (
            "pending",
            "ConnectionError: refused",
            "builtins.ConnectionError",
        )
        fail(engine, claim_one(engine, "errors"), PaymentDeclined("card"))
        info = queue.get_job(job_id, backend=backend)
        assert info is not None
        assert (info.error, info.error_type) == ("PaymentDeclined: card", DECLINED)
        assert events.wait_for_action(audit.CONSUME_FAILURE, job_id=job_id, count=2)
    trail = [(e.attempt, e.data["error_type"]) for e in events.of(audit.CONSUME_FAILURE)]
    assert trail == [(1, "builtins.ConnectionError"), (2, DECLINED)]


def test_a_job_in_the_dlq_keeps_its_error_type(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("errors", {}, max_attempts=1, backend=backend).job_id
    assert fail(engine, claim_one(engine, "errors"), PaymentDeclined("no funds")).state == "failed"
    (dead,) = queue.dlq_list("errors", backend=backend)
    assert (dead.job_id, dead.error_type, dead.reason) == (job_id, DECLINED, "error")


def test_a_job_that_ends_done_has_no_current_error_while_its_attempts_keep_theirs(
    backend: str, engine: Backend
) -> None:
    job_id = queue.enqueue("errors", {}, max_attempts=3, backend=backend).job_id
    with capture_events() as events:
        fail(engine, claim_one(engine, "errors"), PaymentDeclined("first try"))
        assert succeed(engine, claim_one(engine, "errors")).state == "done"
        assert events.wait_for_action(audit.CONSUME_FAILURE, job_id=job_id)
    info = queue.get_job(job_id, backend=backend)
    assert info is not None
    assert (info.state, info.attempts) == ("done", 2)
    assert (info.error, info.traceback, info.error_type, info.reason) == (None, None, None, None)
    (failure,) = events.of(audit.CONSUME_FAILURE)
    assert failure.data["error"] == "PaymentDeclined: first try"
    assert failure.data["error_type"] == DECLINED


def test_a_timeout_is_typed_as_job_timeout(backend: str, engine: Backend) -> None:
    queue.enqueue("errors", {}, max_attempts=3, backend=backend)
    fail(engine, claim_one(engine, "errors"), PaymentDeclined("first"))
    c = claim_one(engine, "errors")
    assert ack(engine, c, outcome(c, lifecycle.TimedOut(5))).state == "pending"
    info = engine.get(c.job_id)
    assert info is not None
    assert (info.reason, info.error_type) == ("timeout", "django_blamequeue.exceptions.JobTimeout")


@pytest.mark.requires("supports_time_travel")
def test_a_stalled_error_is_no_exception_and_leaves_no_older_error_type_behind(
    backend: str, engine: Backend
) -> None:
    job_id = queue.enqueue("errors", {}, max_attempts=3, backend=backend).job_id
    fail(engine, claim_one(engine, "errors"), PaymentDeclined("first"))
    claim_one(engine, "errors", lease=1)
    engine.rescue_expired(later(engine, 60), 100)
    info = engine.get(job_id)
    assert info is not None
    assert (info.state, info.reason, info.error_type) == ("pending", "stalled", None)


def test_a_handlers_exception_reaches_the_job_by_its_class_path(
    backend: str, register: Callable[..., Any]
) -> None:
    def declines(payload: Any) -> None:
        raise PaymentDeclined(f"order {payload['order']}")

    definition = register(declines, max_attempts=1)
    job_id = definition.enqueue({"order": 7}, backend=backend).job_id
    with capture_events() as events:
        queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
        assert events.wait_for_action(audit.DLQ_WRITE, job_id=job_id)
    info = queue.get_job(job_id, backend=backend)
    assert info is not None
    assert (info.error, info.error_type) == ("PaymentDeclined: order 7", DECLINED)
    assert info.traceback is not None and "declines" in info.traceback
