"""conf/values: the predicates and bounds the settings validator checks values with — what each
accepts and refuses at its edges, that every default lies within its own bounds, the bounds
the messages state, and a schedule entry's errors. Pure functions: no settings, no database."""

from __future__ import annotations

import math
from typing import Any

import pytest

from django_blamequeue.conf import Settings
from django_blamequeue.conf.schema import SCHEDULE_KEYS, TOP_KEYS
from django_blamequeue.conf.values import (
    COUNT_0,
    COUNT_1,
    RATE,
    SCALARS,
    SECONDS,
    SECONDS_0,
    can_encode,
    closest,
    is_int,
    is_names,
    is_number,
    is_zone,
    kind,
    schedule_errors,
)
from django_blamequeue.core.validation import MAX_INT, MAX_SECONDS, MIN_INTERVAL

DEFAULTS = Settings(backends={})
TOO_LONG = MAX_SECONDS + 1


# -- predicates ------------------------------------------------------------------------------
def test_an_int_is_an_int_and_never_a_bool() -> None:
    assert is_int(0) and is_int(-3) and is_int(MAX_INT)
    assert not any(is_int(v) for v in (True, False, 1.0, "1", None))


def test_a_number_is_finite_and_never_a_bool() -> None:
    assert is_number(0) and is_number(2.5) and is_number(-1)
    refused = (True, math.nan, math.inf, -math.inf, "1", None, 1j)
    assert not any(is_number(v) for v in refused)


def test_names_are_a_list_or_tuple_of_non_empty_strings() -> None:
    assert is_names(["default", "mail"]) and is_names(("a",))
    assert not is_names("default")  # a bare string is not a list of names
    assert not is_names(["a", ""]) and not is_names(["a", 1]) and not is_names({"a"})


def test_a_zone_is_an_iana_time_zone_name() -> None:
    assert is_zone("Europe/Paris") and is_zone("UTC")
    assert not any(is_zone(v) for v in ("Mars/Olympus_Mons", "", "../etc/passwd", 1, None))


def test_a_serializer_can_encode_when_kombu_has_its_encoder() -> None:
    assert can_encode("json")
    assert not any(can_encode(v) for v in ("no-such-serializer", "application/json", None, 1))


def test_the_closest_key_is_suggested_whatever_its_case() -> None:
    assert closest("default_lese", TOP_KEYS) == ' Did you mean "DEFAULT_LEASE"?'
    assert closest("crn", SCHEDULE_KEYS) == ' Did you mean "cron"?'
    assert closest("zzzzzz", TOP_KEYS) == ""


def test_kind_is_the_type_name_a_message_shows() -> None:
    assert (kind([]), kind(1.5), kind(None)) == ("list", "float", "NoneType")


# -- scalar settings -------------------------------------------------------------------------
def test_every_scalar_key_is_a_top_key() -> None:
    assert set(SCALARS) <= set(TOP_KEYS)


@pytest.mark.parametrize("key", sorted(SCALARS))
def test_every_scalar_default_lies_within_its_own_bounds(key: str) -> None:
    accepts, what = SCALARS[key]
    default = getattr(DEFAULTS, key.lower())
    assert accepts(default), f"{key} default {default!r} is not {what}"


SECONDS_KEYS = [
    "DEFAULT_LEASE",
    "SWEEP_INTERVAL",
    "FLOW_SWEEP_INTERVAL",
    "MISSING_HANDLER_TIMEOUT",
    "WORKER_STALLED_AFTER",
]
SECONDS_0_KEYS = ["BACKOFF_BASE", "BACKOFF_MAX", "PROGRESS_THROTTLE", "SHUTDOWN_GRACE"]
EDGES: list[tuple[str, list[Any], list[Any]]] = [
    *[(k, [0.001, 1, MAX_SECONDS], [0, -1, TOO_LONG, True, math.inf, "5"]) for k in SECONDS_KEYS],
    *[(k, [0, 0.5, MAX_SECONDS], [-0.001, TOO_LONG, False, math.nan]) for k in SECONDS_0_KEYS],
    ("DEFAULT_MAX_ATTEMPTS", [1, MAX_INT], [0, MAX_INT + 1, 2.0, True]),
    ("MAX_STALLED_COUNT", [0, MAX_INT], [-1, MAX_INT + 1, 1.0]),
    ("MAX_SNOOZES", [0, MAX_INT], [-1, MAX_INT + 1, None]),
    ("MAX_FLOW_DEPTH", [1, 50], [0, -1, 1.5, True]),
    ("BACKOFF_JITTER", [True, False], [1, 0, "yes", None]),
    ("ORIGIN_SITE", [True, False], [1, "true"]),
    ("LOG_TRACEBACKS", ["final", "every", "never"], ["all", "", None, True]),
    ("ATTEMPT_HISTORY", ["failures", "all", "off"], ["none", "", None, True]),
]


@pytest.mark.parametrize(("key", "accepted", "refused"), EDGES, ids=[e[0] for e in EDGES])
def test_a_scalar_setting_accepts_its_bounds_and_refuses_past_them(
    key: str, accepted: list[Any], refused: list[Any]
) -> None:
    accepts, _ = SCALARS[key]
    assert [v for v in accepted if not accepts(v)] == []
    assert [v for v in refused if accepts(v)] == []


def test_every_scalar_setting_has_its_edges_tested() -> None:
    assert {key for key, _, _ in EDGES} == set(SCALARS)


def test_the_bounds_are_stated_in_the_words_of_the_messages() -> None:
    assert SECONDS == "seconds > 0 (at most 3,155,760,000)"
    assert SECONDS_0 == "seconds >= 0 (at most 3,155,760,000)"
    assert COUNT_1 == "an int from 1 to 2,147,483,647"
    assert COUNT_0 == "an int from 0 to 2,147,483,647"
    assert RATE.startswith(f"(max, per_seconds): max {COUNT_1}")
    assert SCALARS["DEFAULT_LEASE"][1] == SECONDS
    assert SCALARS["DEFAULT_MAX_ATTEMPTS"][1] == COUNT_1


# -- schedule entries ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "entry",
    [
        {"job": "app.jobs.report", "cron": "*/5 * * * *"},
        {"job": "app.jobs.report", "interval": MIN_INTERVAL},
        {
            "job": "app.jobs.report",
            "interval": 300,
            "timezone": "Europe/Paris",
            "payload": {"kind": "daily"},
            "queue": "reports",
            "enabled": False,
            "backend": "default",
        },
    ],
)
def test_a_valid_schedule_entry_has_no_errors(entry: dict[str, Any]) -> None:
    assert schedule_errors(entry) == []


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ({"job": "j", "cron": "* * * * *", "crn": 1}, "'crn' is not a schedule key. Did you mean"),
        ({"cron": "* * * * *"}, '"job" is None; expected a job name'),
        ({"job": "", "cron": "* * * * *"}, "\"job\" is ''; expected a job name"),
        ({"job": "j"}, 'give exactly one of "cron" and "interval"'),
        ({"job": "j", "cron": "* * * * *", "interval": 5}, 'give exactly one of "cron"'),
        ({"job": "j", "cron": 5}, '"cron" 5 is not a str'),
        ({"job": "j", "interval": 0}, '"interval" is 0; expected 0.001 to 3,155,760,000 s'),
        ({"job": "j", "interval": TOO_LONG}, '"interval" is 3155760001; expected'),
        ({"job": "j", "interval": True}, '"interval" is True; expected'),
        ({"job": "j", "interval": 5, "payload": math.nan}, '"payload" '),
        ({"job": "j", "interval": 5, "timezone": "Mars/Base"}, "not an IANA time zone"),
        ({"job": "j", "interval": 5, "queue": ""}, "expected a non-empty queue name"),
    ],
)
def test_a_schedule_entry_error_names_the_key_and_what_it_should_be(
    entry: dict[str, Any], error: str
) -> None:
    errors = schedule_errors(entry)
    assert len(errors) == 1, errors
    assert error in errors[0], errors


def test_a_bad_cron_expression_says_why() -> None:
    (error,) = schedule_errors({"job": "j", "cron": "61 * * * *"})
    assert error.startswith("\"cron\" '61 * * * *' ")


def test_every_error_of_an_entry_is_reported_at_once() -> None:
    entry = {"cron": 1, "timezone": "Nowhere/City", "queue": 3, "colour": "red"}
    assert len(schedule_errors(entry)) == 5
