"""Argument checks of the public API (docs/concepts.md): refused at once, with a stable code.

These run without a database: a refusal must come before any backend call.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from django_blamequeue import ErrorCode, QueueError, queue
from django_blamequeue.core.validation import parse_rate_limit, rate_limit


def code_of(call: Any, *args: Any, **kwargs: Any) -> ErrorCode:
    with pytest.raises(QueueError) as caught:
        call(*args, **kwargs)
    return caught.value.code


BAD_RATE_LIMITS = [
    (0, 1.0),
    (-1, 1.0),
    (1.5, 1.0),
    (True, 1.0),
    ("2", 1.0),
    (None, 1.0),
    (2, math.inf),
    (2, -math.inf),
    (2, math.nan),
    (2, 0),
    (2, 0.0),
    (2, -1.0),
    (2, "1"),
    (2, None),
    (2, False),
    2,
    "2/1",
    (2,),
    (2, 1.0, 3),
    [],
    {},
    object(),
]


@pytest.mark.parametrize("value", BAD_RATE_LIMITS, ids=repr)
def test_consume_refuses_a_bad_rate_limit_at_once(value: Any) -> None:
    assert code_of(queue.consume, "q", lambda job, ctx: None, rate_limit=value) == (
        ErrorCode.BAD_RATE_LIMIT
    )
    assert queue._consumers == [], "nothing may be started"


@pytest.mark.parametrize("value", BAD_RATE_LIMITS, ids=repr)
def test_the_rate_limit_validator_refuses_the_same_values(value: Any) -> None:
    assert code_of(rate_limit, value) == ErrorCode.BAD_RATE_LIMIT


@pytest.mark.parametrize(
    ("value", "expected"),
    [((1, 1), (1, 1.0)), ((10, 0.5), (10, 0.5)), ([3, 2.0], (3, 2.0)), (None, None)],
)
def test_a_positive_int_and_a_positive_finite_number_are_a_rate_limit(
    value: Any, expected: Any
) -> None:
    assert rate_limit(value) == expected


@pytest.mark.parametrize("text", ["0/1", "2/0", "2/inf", "2/nan", "1.5/1", "x/1", "2", ""])
def test_the_command_line_form_is_checked_the_same_way(text: str) -> None:
    assert code_of(parse_rate_limit, text) == ErrorCode.BAD_RATE_LIMIT


def test_the_command_line_form_parses_max_over_seconds() -> None:
    assert parse_rate_limit("5/2.5") == (5, 2.5)


@pytest.mark.parametrize("name", ["", "   ", None, 3, b"q", "q" * 201])
def test_enqueue_without_a_queue_name_is_missing_queue(name: Any) -> None:
    assert code_of(queue.enqueue, name, {}) == ErrorCode.MISSING_QUEUE


@pytest.mark.parametrize("name", ["", None, 3, []])
def test_consume_without_a_queue_name_is_missing_queue(name: Any) -> None:
    assert code_of(queue.consume, name, lambda job, ctx: None) == ErrorCode.MISSING_QUEUE


@pytest.mark.parametrize("call", ["size", "purge", "dlq_size", "dlq_list", "dlq_retry_all"])
def test_queue_operations_without_a_queue_name_are_missing_queue(call: str) -> None:
    assert code_of(getattr(queue, call), "") == ErrorCode.MISSING_QUEUE


@pytest.mark.parametrize(
    "delay", [-1, -0.001, math.inf, math.nan, "10", True, timedelta(seconds=-1), [1]], ids=repr
)
def test_a_bad_delay_is_refused(delay: Any) -> None:
    assert code_of(queue.enqueue, "q", {}, delay=delay) == ErrorCode.BAD_ARGUMENT


@pytest.mark.parametrize("run_at", [datetime(2030, 1, 1), "2030-01-01T00:00:00Z", 1893456000])
def test_a_naive_or_non_datetime_run_at_is_refused(run_at: Any) -> None:
    assert code_of(queue.enqueue, "q", {}, run_at=run_at) == ErrorCode.BAD_ARGUMENT


@pytest.mark.parametrize("priority", [1.5, "1", None, True, 2**31, -(2**31)], ids=repr)
def test_a_bad_priority_is_refused(priority: Any) -> None:
    assert code_of(queue.enqueue, "q", {}, priority=priority) == ErrorCode.BAD_ARGUMENT


@pytest.mark.parametrize("max_attempts", [0, -1, 1.5, "3", True])
def test_a_bad_max_attempts_is_refused(max_attempts: Any) -> None:
    assert code_of(queue.enqueue, "q", {}, max_attempts=max_attempts) == ErrorCode.BAD_ARGUMENT


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("concurrency", 0),
        ("concurrency", 1.5),
        ("lease", -1),
        ("lease", math.inf),
        ("poll_interval", 0),
        ("fast_poll", math.nan),
    ],
)
def test_bad_consumer_options_are_refused(option: str, value: Any) -> None:
    kwargs = {option: value}
    assert code_of(queue.consume, "q", lambda job, ctx: None, **kwargs) == ErrorCode.BAD_ARGUMENT
    assert queue._consumers == []


def test_a_handler_that_is_not_callable_is_invalid_handler() -> None:
    assert code_of(queue.consume, "q", "not callable") == ErrorCode.INVALID_HANDLER


def test_an_unregistered_job_name_is_unknown_job() -> None:
    assert code_of(queue.enqueue, "q", {}, name="tests.nobody.registered.this") == (
        ErrorCode.UNKNOWN_JOB
    )


def test_enqueue_many_refuses_a_single_mapping_for_a_list_of_payloads() -> None:
    assert code_of(queue.enqueue_many, "q", {"a": 1}) == ErrorCode.BAD_PAYLOAD


def test_an_aware_run_at_and_a_timedelta_delay_are_accepted_by_validation() -> None:
    from django_blamequeue.core import validation

    when = datetime(2030, 1, 1, tzinfo=UTC)
    assert validation.run_at(when) == when
    assert validation.delay(timedelta(seconds=90)) == 90.0
