"""Retry delay: ``min(base · 2^(attempt-1), max)``, defaults 1 s and 300 s, no jitter."""

from __future__ import annotations

import pytest

from django_blamequeue.core.backoff import backoff_seconds


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [
        (1, 1.0),
        (2, 2.0),
        (3, 4.0),
        (4, 8.0),
        (5, 16.0),
        (8, 128.0),
        (9, 256.0),
        (10, 300.0),
        (11, 300.0),
        (50, 300.0),
    ],
)
def test_default_delay_doubles_from_one_second_and_caps_at_300(
    attempt: int, expected: float
) -> None:
    assert backoff_seconds(attempt) == expected


@pytest.mark.parametrize(
    ("attempt", "expected"), [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 5.0), (6, 5.0)]
)
def test_base_and_max_are_the_formulas_parameters(attempt: int, expected: float) -> None:
    assert backoff_seconds(attempt, base=0.5, maximum=5.0) == expected


def test_without_jitter_the_delay_is_the_same_every_time() -> None:
    assert {backoff_seconds(4) for _ in range(100)} == {8.0}


def test_a_huge_attempt_number_is_capped_not_an_overflow() -> None:
    assert backoff_seconds(10_000) == 300.0
    assert backoff_seconds(10_000, base=1e300, maximum=1e308) == 1e308


@pytest.mark.parametrize("attempt", [1, 3, 6, 12])
def test_jitter_stays_between_zero_and_the_unjittered_delay(attempt: int) -> None:
    cap = backoff_seconds(attempt, base=1.0, maximum=60.0)
    delays = [backoff_seconds(attempt, base=1.0, maximum=60.0, jitter=True) for _ in range(500)]
    assert all(0.0 <= d <= cap for d in delays)
    assert len(set(delays)) > 1, "jitter must actually vary the delay"
    assert min(delays) < cap / 2 < max(delays), "full jitter spreads over the whole range"
