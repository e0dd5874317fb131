"""``JobOptions`` (core/options.py): the one carrier of a job's options, as tables.

Merging: the call's value, else the job definition's, else the settings', else the built-in
default. Checking: ``check_defaults`` at registration (``INVALID_HANDLER``), ``checked`` per
enqueue (``BAD_ARGUMENT``, ``MISSING_QUEUE``), with the messages the API has always given.
Last, each way to enqueue is pinned to the precedence it has (stored jobs captured at
``enqueueing.store``, so no engine is needed).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import fields
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import Child, QueueError, job, queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.core.options import (
    BUILT_IN,
    CALL_OPTIONS,
    UNSET,
    JobOptions,
)
from django_blamequeue.core.records import EnqueuedJob, NewJob
from django_blamequeue.exceptions import ErrorCode
from django_blamequeue.jobs import enqueueing, registry
from django_blamequeue.jobs.flows import FlowSpec, build_children

SETTINGS = JobOptions(max_attempts=3)  # the settings' layer: DEFAULT_MAX_ATTEMPTS


def own(**options: Any) -> JobOptions:
    """A job definition's options, as ``@job`` makes them (queue, backend and priority are
    always given there)."""
    return JobOptions(**{"queue": "own", "backend": None, "priority": 0} | options).check_defaults()


# -- merging --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("option", "call", "definition", "expected"),
    [
        # None means "not given" for most options: the definition's, else the settings'
        ("max_attempts", 5, 4, 5),
        ("max_attempts", None, 4, 4),
        ("max_attempts", None, None, 3),  # the settings' default
        ("concurrency_key", "call", "own-key", "call"),
        ("concurrency_key", None, "own-key", "own-key"),
        ("timeout", None, 12.5, 12.5),
        ("backoff_base", None, 2.0, 2.0),
        ("classification", "c", None, "c"),
        # UNSET is "not given" for priority, backend and queue; their None is a value
        ("priority", UNSET, 7, 7),
        ("priority", 0, 7, 0),
        ("priority", None, 7, None),  # refused by checked(), as priority=None always was
        ("backend", UNSET, "other", "other"),
        ("backend", None, "other", None),  # the default backend, not the definition's
        ("queue", UNSET, "mail", "mail"),
        ("queue", "call-queue", "mail", "call-queue"),
    ],
)
def test_the_call_wins_then_the_definition_then_the_settings(
    option: str, call: Any, definition: Any, expected: Any
) -> None:
    merged = JobOptions.merge({option: call}, own(**{option: definition}), SETTINGS)
    assert getattr(merged, option) == expected


def test_what_nobody_gives_is_the_built_in_default() -> None:
    merged = JobOptions.merge({}, None, JobOptions())
    assert (merged.priority, merged.backend, merged.queue) == (0, None, UNSET)
    assert (BUILT_IN.priority, BUILT_IN.backend) == (0, None)
    assert (merged.max_attempts, merged.timeout, merged.dedupe_key) == (None, None, None)


def test_an_option_left_out_is_not_given_and_an_unknown_name_is_a_type_error() -> None:
    assert JobOptions.merge({}, own(priority=7), SETTINGS).priority == 7
    with pytest.raises(TypeError, match="'ttl'"):
        JobOptions.merge({"ttl": 60}, None, SETTINGS)


def test_a_merge_leaves_its_layers_as_they_were_and_follows_new_ones() -> None:
    call, definition = {"priority": 2}, own(max_attempts=4)
    first = JobOptions.merge(call, definition, SETTINGS)
    assert (first.priority, first.max_attempts) == (2, 4)
    assert (call, definition.priority, definition.max_attempts) == ({"priority": 2}, 0, 4)
    assert JobOptions.merge(call, own(max_attempts=6), SETTINGS).max_attempts == 6  # not stale
    assert JobOptions.merge(call, None, JobOptions(max_attempts=9)).max_attempts == 9
    assert JobOptions.merge(call, definition, SETTINGS) == first


# -- checks at registration ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("given", "code", "message"),
    [
        ({"queue": ""}, ErrorCode.MISSING_QUEUE, "@job needs a non-empty queue name"),
        ({"queue": None}, ErrorCode.MISSING_QUEUE, "@job needs a non-empty queue name"),
        ({"max_attempts": 0}, ErrorCode.INVALID_HANDLER, "max_attempts must be a positive int"),
        ({"max_attempts": True}, ErrorCode.INVALID_HANDLER, "max_attempts must be a positive int"),
        (
            {"timeout": float("inf")},
            ErrorCode.INVALID_HANDLER,
            "timeout must be a positive number of seconds",
        ),
        ({"retryable": 3}, ErrorCode.INVALID_HANDLER, "retryable must be a callable(exc) -> bool"),
        (
            {"concurrency_key": ""},
            ErrorCode.INVALID_HANDLER,
            "concurrency_key must be a non-empty string or a callable of the payload",
        ),
        (
            {"backoff_base": float("nan")},
            ErrorCode.INVALID_HANDLER,
            "backoff_base must be seconds > 0 and ≤ 3,155,760,000",
        ),
        (
            {"backoff_max": True},
            ErrorCode.INVALID_HANDLER,
            "backoff_max must be seconds > 0 and ≤ 3,155,760,000",
        ),
        ({"jitter": "yes"}, ErrorCode.INVALID_HANDLER, "jitter must be True or False"),
        (
            {"dedupe_key": "k" * 256},
            ErrorCode.INVALID_HANDLER,
            "dedupe_key must be a non-empty string of ≤255 characters",
        ),
    ],
)
def test_a_bad_default_is_refused_with_its_code_and_message(
    given: dict[str, Any], code: ErrorCode, message: str
) -> None:
    with pytest.raises(QueueError) as caught:
        JobOptions(**given).check_defaults()
    assert (caught.value.code, caught.value.message) == (code, message)


def test_the_same_checks_run_through_job_with_the_same_code() -> None:
    with pytest.raises(QueueError) as caught:
        job(queue="q", max_attempts=0)
    assert (caught.value.code, caught.value.message) == (
        ErrorCode.INVALID_HANDLER,
        "max_attempts must be a positive int",
    )


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be a positive int, not 0"),
        ({"timeout": -1}, "timeout must be a positive number of seconds, not -1"),
        ({"dedupe_key": ""}, "dedupe_key must be a non-empty string of ≤255 characters"),
    ],
)
def test_quoted_the_message_names_the_value_but_never_a_text(
    given: dict[str, Any], message: str
) -> None:
    with pytest.raises(QueueError) as caught:
        JobOptions(**given).check_defaults(quote=True)
    assert caught.value.message == message  # the django.tasks backend's InvalidTask wording


def test_only_given_defaults_are_checked_and_seconds_become_floats() -> None:
    assert JobOptions().check_defaults() == JobOptions()
    checked = JobOptions(timeout=2, backoff_base=1, backoff_max=60).check_defaults()
    assert (checked.timeout, checked.backoff_base, checked.backoff_max) == (2.0, 1.0, 60.0)
    assert all(isinstance(v, float) for v in (checked.timeout, checked.backoff_base))


# -- checks per enqueue ---------------------------------------------------------------------
def checked(**given: Any) -> JobOptions:
    return JobOptions.merge({"queue": "q"} | given, None, SETTINGS).checked()


@pytest.mark.parametrize(
    ("given", "code", "message"),
    [
        (
            {"queue": ""},
            ErrorCode.MISSING_QUEUE,
            "a queue name must be a non-empty string, not ''",
        ),
        (
            {"priority": None},
            ErrorCode.BAD_ARGUMENT,
            "priority must be an int within ±2,147,483,647, not None",
        ),
        (
            {"priority": True},
            ErrorCode.BAD_ARGUMENT,
            "priority must be an int within ±2,147,483,647, not True",
        ),
        (
            {"delay": -1},
            ErrorCode.BAD_ARGUMENT,
            "delay must be seconds from 0 to 3,155,760,000 (100 years), not -1",
        ),
        (
            {"run_at": datetime(2030, 1, 1)},
            ErrorCode.BAD_ARGUMENT,
            "run_at must be a timezone-aware datetime",
        ),
        (
            {"max_attempts": 0},
            ErrorCode.BAD_ARGUMENT,
            "max_attempts must be an int from 1 to 2,147,483,647, not 0",
        ),
        (
            {"classification": "c" * 101},
            ErrorCode.BAD_ARGUMENT,
            "classification must be a non-empty string of ≤100 characters without NUL or a "
            "lone surrogate",
        ),
        (
            {"trace_id": "t\x00"},
            ErrorCode.BAD_ARGUMENT,
            "trace_id must be a non-empty string of ≤64 characters without NUL or a lone surrogate",
        ),
    ],
)
def test_a_bad_option_is_refused_per_enqueue_with_its_code_and_message(
    given: dict[str, Any], code: ErrorCode, message: str
) -> None:
    with pytest.raises(QueueError) as caught:
        checked(**given)
    assert (caught.value.code, caught.value.message) == (code, message)


def test_the_checks_run_in_a_fixed_order_so_the_first_bad_option_is_named() -> None:
    with pytest.raises(QueueError) as caught:  # queue, priority, delay, run_at, max_attempts, …
        checked(priority="high", delay=-1, max_attempts=0)
    assert caught.value.message.startswith("priority")
    with pytest.raises(QueueError) as caught:
        checked(delay=-1, max_attempts=0)
    assert caught.value.message.startswith("delay")


def test_checked_answers_the_stored_forms_and_copies_only_when_they_differ() -> None:
    plain = JobOptions.merge({"queue": "q", "priority": 1}, None, SETTINGS)
    assert plain.checked() is plain
    east = timezone(timedelta(hours=5))
    at = datetime(2030, 1, 1, 5, tzinfo=east)
    given = {"queue": "q", "delay": timedelta(seconds=90), "run_at": at}
    timed = JobOptions.merge(given, None, SETTINGS)
    assert (timed.checked().delay, timed.checked().run_at) == (
        90.0,
        datetime(2030, 1, 1, tzinfo=UTC),
    )
    assert timed.checked().run_at.tzinfo is UTC  # type: ignore[union-attr]
    assert checked(delay=0).delay is None  # 0 is "now", as it always was


def test_stored_options_are_newjob_fields_of_the_same_name() -> None:
    stored = JobOptions.merge({"queue": "q", "priority": 1}, None, SETTINGS).stored()
    assert set(stored) <= {f.name for f in fields(NewJob)}
    assert {"queue", "priority", "max_attempts", "timeout", "delay", "run_at"} <= set(stored)
    assert (stored["queue"], stored["priority"], stored["max_attempts"]) == ("q", 1, 3)
    assert "backend" not in stored and "trace_id" not in stored  # routing; resolved per batch


def test_the_call_options_are_the_option_keywords_of_queue_enqueue() -> None:
    keywords = set(inspect.signature(queue.enqueue).parameters)
    not_options = {"queue_name", "payload", "name"}
    assert keywords - not_options == CALL_OPTIONS


def test_unset_is_false_and_named() -> None:
    assert not UNSET and repr(UNSET) == "UNSET" and type(UNSET)() is UNSET


# -- each way to enqueue, and the precedence it has -----------------------------------------
@pytest.fixture
def stored(monkeypatch: pytest.MonkeyPatch) -> list[NewJob]:
    """The jobs handed to a backend (``enqueueing.store``), none stored."""
    jobs: list[NewJob] = []

    def capture(target: Backend, new: list[NewJob], events: Any) -> list[EnqueuedJob]:
        jobs.extend(new)
        return [EnqueuedJob(job_id=j.job_id, queue_name=j.queue, backend=target.alias) for j in new]

    monkeypatch.setattr(enqueueing, "store", capture)
    return jobs


@pytest.fixture
def names() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        registry.unregister(name)


def test_a_jobs_own_calls_take_its_options_when_the_call_leaves_them_out(
    stored: list[NewJob], names: list[str], settings: SettingsWrapper
) -> None:
    settings.BLAMEQUEUE = {"DEFAULT_MAX_ATTEMPTS": 9}

    @job(queue="mail", name="tests.unit.options.own", priority=5, max_attempts=4, timeout=30)
    def send(payload: Any) -> None: ...

    @job(queue="mail", name="tests.unit.options.bare")
    def bare(payload: Any) -> None: ...

    names.extend([send.name, bare.name])
    send.enqueue({})
    send.enqueue({}, priority=1, max_attempts=2)
    send.delay(1)
    bare.enqueue({})
    got = [(j.queue, j.name, j.priority, j.max_attempts, j.timeout) for j in stored]
    assert got == [
        ("mail", send.name, 5, 4, 30.0),
        ("mail", send.name, 1, 2, 30.0),
        ("mail", send.name, 5, 4, 30.0),
        ("mail", bare.name, 0, 9, None),  # the settings' DEFAULT_MAX_ATTEMPTS
    ]
    with pytest.raises(QueueError) as caught:  # given None is not left out
        send.enqueue({}, priority=None)
    assert caught.value.code == ErrorCode.BAD_ARGUMENT
    send.enqueue({}, queue="other")  # routes this call (Celery's queue=)
    assert (stored[-1].queue, stored[-1].priority) == ("other", 5)
    with pytest.raises(QueueError) as unknown:  # never a bare TypeError
        send.enqueue({}, ttl=5)
    assert unknown.value.code == ErrorCode.BAD_ARGUMENT


def test_the_facade_takes_a_named_jobs_attempts_and_timeout_but_not_its_priority(
    stored: list[NewJob], names: list[str]
) -> None:
    @job(queue="mail", name="tests.unit.options.named", priority=5, max_attempts=4, timeout=30)
    def send(payload: Any) -> None: ...

    names.append(send.name)
    queue.enqueue("elsewhere", {}, name=send.name)
    queue.enqueue_many("elsewhere", [{}, {}], name=send.name, priority=2, max_attempts=7)
    got = [(j.queue, j.priority, j.max_attempts, j.timeout) for j in stored]
    assert got == [
        ("elsewhere", 0, 4, 30.0),  # priority= defaults to 0 here, whatever the job says
        ("elsewhere", 2, 7, 30.0),
        ("elsewhere", 2, 7, 30.0),
    ]


def test_a_concurrency_key_per_payload_falls_back_to_the_jobs_own_callable(
    stored: list[NewJob], names: list[str]
) -> None:
    @job(queue="q", name="tests.unit.options.keyed", concurrency_key=lambda p: f"t{p['t']}")
    def keyed(payload: Any) -> None: ...

    names.append(keyed.name)
    keyed.enqueue_many([{"t": 1}, {"t": 2}], concurrency_keys=["given", None])
    keyed.enqueue({"t": 3}, concurrency_key="call")
    keyed.enqueue({"t": 4})
    assert [j.concurrency_key for j in stored] == ["given", "t2", "call", "t4"]
    with pytest.raises(QueueError) as caught:  # a call's key is a key, never a callable
        keyed.enqueue({"t": 5}, concurrency_key=lambda p: "x")
    assert caught.value.code == ErrorCode.BAD_ARGUMENT


def test_a_flow_child_takes_its_own_options_over_its_jobs(names: list[str]) -> None:
    @job(queue="pages", name="tests.unit.options.page", priority=5, max_attempts=4)
    def page(payload: Any) -> None: ...

    names.append(page.name)

    class Fan:
        def fan_out(self, payload: Any) -> list[Child]:
            return [Child(page, {"p": 0}), Child(page, {"p": 1}, priority=3, max_attempts=2)]

    parent = NewJob(
        job_id="01PARENT00000000000000000P",
        queue="q",
        name="fan",
        payload=None,  # type: ignore[arg-type]
        trace_id="trace",
    )
    children = build_children(FlowSpec(cls=Fan), parent, None, "default", 5)
    got = [(c.job.queue, c.job.priority, c.job.max_attempts, c.job.trace_id) for c in children]
    assert got == [("pages", 0, 4, "trace"), ("pages", 3, 2, "trace")]
