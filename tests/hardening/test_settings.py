"""Settings: ``manage.py check`` bounds what the API bounds, so a setting
cannot make every enqueue fail or write a row nothing reads."""

from __future__ import annotations

import math
from typing import Any

import pytest

from django_blamequeue.conf.validator import validate
from django_blamequeue.core.validation import MAX_INT, MAX_SECONDS


def problems(raw: dict[str, Any]) -> list[Any]:
    return list(validate(raw, databases={"default": {}}))


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"job": "a.b", "interval": 1e-9}, '"interval" is 1e-09'),
        ({"job": "a.b", "interval": 1e308}, '"interval" is 1e+308'),
        ({"job": "a.b", "interval": 60, "payload": {"x": math.nan}}, '"payload" holds nan'),
        (
            {"job": "a.b", "interval": 60, "payload": "a\x00"},
            '"payload" holds a string with NUL or a lone surrogate',
        ),
    ],
)
def test_settings_schedules_are_checked_with_the_same_bounds(
    entry: dict[str, Any], says: str
) -> None:
    found = problems({"SCHEDULES": {"s": entry}})
    assert {p.id for p in found} == {"E011"}
    assert any(says in p.message for p in found), found


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("DEFAULT_LEASE", 1e300),
        ("DEFAULT_LEASE", MAX_SECONDS + 1),
        ("BACKOFF_MAX", 1e12),
        ("SHUTDOWN_GRACE", math.inf),
        ("SWEEP_INTERVAL", 1e12),
        ("DEFAULT_MAX_ATTEMPTS", 2**31),
        ("MAX_STALLED_COUNT", 2**40),
    ],
)
def test_settings_past_the_api_bounds_are_e012(key: str, value: Any) -> None:
    found = problems({key: value})
    assert [p.id for p in found] == ["E012"], found
    assert "at most" in found[0].message or f"{MAX_INT:,}" in found[0].message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("DEFAULT_LEASE", MAX_SECONDS),
        ("BACKOFF_MAX", MAX_SECONDS),
        ("DEFAULT_MAX_ATTEMPTS", MAX_INT),
    ],
)
def test_settings_at_the_bounds_have_no_problem(key: str, value: Any) -> None:
    raw: dict[str, Any] = {key: value}
    if key == "BACKOFF_MAX":
        raw["BACKOFF_BASE"] = 1.0
    assert problems(raw) == []
