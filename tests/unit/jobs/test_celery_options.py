"""Celery's call surface without a worker: a handler is called as it is written (no payload
→ no argument for a handler that needs none), ``apply_async``'s options are translated,
ignored as documented no-ops, or refused naming the replacement — never a bare ``TypeError``
— and a call that cannot bind to the handler is found before it runs."""

from __future__ import annotations

from typing import Any

import pytest

from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs.calls import (
    IGNORED,
    REPLACED,
    bind_problem,
    call_with,
    envelope,
    needs_argument,
    split,
)


def no_arguments() -> str:
    return "ran"


def with_default(batch_size: int = 500) -> int:
    return batch_size


def one_payload(payload: Any) -> Any:
    return payload


def keyword_only(*, dry_run: bool = False) -> bool:
    return dry_run


@pytest.mark.parametrize(
    ("func", "expected"),
    [
        (no_arguments, "ran"),
        (with_default, 500),  # its default, never None (the bug that deleted every row)
        (keyword_only, False),
        (one_payload, None),  # a payload handler still gets the payload, None
    ],
)
def test_no_payload_calls_a_handler_as_it_is_written(func: Any, expected: Any) -> None:
    assert call_with(func, None) == expected


def test_only_a_required_positional_parameter_needs_the_payload() -> None:
    assert needs_argument(one_payload)
    assert not needs_argument(no_arguments)
    assert not needs_argument(with_default)
    assert not needs_argument(keyword_only)
    assert not needs_argument(lambda *args: args)
    assert needs_argument(len)  # a builtin: taken to need one, as before


@pytest.mark.parametrize(
    ("func", "payload", "problem"),
    [
        (no_arguments, None, None),
        (no_arguments, envelope(), None),
        (with_default, envelope([], {"batch_size": 100}), None),
        (one_payload, {"a": 1}, None),
        (no_arguments, {"a": 1}, "too many positional arguments"),
        (with_default, envelope([], {"size": 1}), "unexpected keyword argument 'size'"),
        (one_payload, envelope([1, 2]), "too many positional arguments"),
    ],
)
def test_a_call_that_cannot_bind_is_found_before_it_runs(
    func: Any, payload: Any, problem: str | None
) -> None:
    found = bind_problem(func, payload)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found and func.__name__ in found


def test_apply_async_options_become_job_options_and_celery_names_translate() -> None:
    given, batch = split(
        {"countdown": 10, "queue": "webhooks", "expires": 60, "priority": 5, "headers": {"a": 1}}
    )
    assert given == {"delay": 10, "queue": "webhooks", "expires": 60, "priority": 5}
    assert batch == {"cause": {"headers": {"a": 1}}}


@pytest.mark.parametrize("option", sorted(IGNORED))
def test_options_with_no_meaning_here_are_accepted_and_ignored(option: str) -> None:
    assert split({option: True}) == ({}, {})


@pytest.mark.parametrize("option", sorted(REPLACED))
def test_options_with_a_replacement_are_refused_naming_it(option: str) -> None:
    with pytest.raises(QueueError) as caught:
        split({option: "x"})
    assert caught.value.code == ErrorCode.BAD_ARGUMENT
    assert f"{option}= has no meaning here; use {REPLACED[option]}" in caught.value.message


def test_the_configured_serializer_is_a_no_op_and_an_unknown_option_is_refused() -> None:
    assert split({"serializer": "json"}) == ({}, {})
    with pytest.raises(QueueError) as caught:
        split({"prioritty": 5})
    assert caught.value.code == ErrorCode.BAD_ARGUMENT
    assert "unknown enqueue option prioritty=" in caught.value.message
    assert "priority" in caught.value.message


@pytest.mark.parametrize("headers", [["a"], {1: "x"}, {"a": float("nan")}])
def test_headers_must_be_a_json_dict(headers: Any) -> None:
    with pytest.raises(QueueError) as caught:
        split({"headers": headers})
    assert caught.value.code == ErrorCode.BAD_ARGUMENT
