"""Retry decisions (core/retry.py): a job's ``RetryPolicy`` from the settings and its own
options, built once per pair, and what it decides."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from django_blamequeue import Unrecoverable
from django_blamequeue.core import lifecycle
from django_blamequeue.core.options import JobOptions
from django_blamequeue.core.retry import (
    RetryPolicy,
    backoff_seconds,
    is_retryable,
    policy_for,
)


@dataclass(frozen=True)
class Values:
    """Settings' values, as ``conf.Settings`` has them."""

    backoff_base: float = 1.0
    backoff_max: float = 300.0
    backoff_jitter: bool = False
    max_snoozes: int = 1000
    missing_handler_timeout: float = 604800.0


SETTINGS = Values(backoff_base=7.0, backoff_max=90.0, max_snoozes=5, missing_handler_timeout=60.0)


def never(exc: BaseException) -> bool:
    return False


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (None, (7.0, 90.0, False, None)),  # no definition: the settings' alone
        (JobOptions(), (7.0, 90.0, False, None)),
        (JobOptions(backoff_base=2.0), (2.0, 90.0, False, None)),
        (JobOptions(backoff_max=9.0, jitter=True), (7.0, 9.0, True, None)),
        (JobOptions(jitter=False, retryable=never), (7.0, 90.0, False, never)),
    ],
)
def test_a_jobs_own_backoff_options_win_over_the_settings(
    options: JobOptions | None, expected: tuple[object, ...]
) -> None:
    policy = RetryPolicy.of(options, SETTINGS)
    assert (policy.backoff_base, policy.backoff_max, policy.backoff_jitter, policy.retryable) == (
        expected
    )
    assert (policy.max_snoozes, policy.missing_handler_timeout) == (5, 60.0)  # settings only


def test_settings_with_jitter_keep_it_unless_the_job_says_otherwise() -> None:
    jittery = Values(backoff_jitter=True)
    assert RetryPolicy.of(None, jittery).backoff_jitter is True
    assert RetryPolicy.of(JobOptions(jitter=False), jittery).backoff_jitter is False


@pytest.mark.parametrize("attempt", [0, 1, 2, 3, 9, 10_000])
def test_the_policys_delay_is_the_backoff_of_its_knobs(attempt: int) -> None:
    policy = RetryPolicy(backoff_base=0.5, backoff_max=30.0)
    assert policy.delay(attempt) == backoff_seconds(attempt, base=0.5, maximum=30.0)


def test_a_policy_is_built_once_per_options_and_settings_object() -> None:
    options = JobOptions(backoff_base=2.0)
    first = policy_for(options, SETTINGS)
    assert policy_for(options, SETTINGS) is first
    assert policy_for(JobOptions(backoff_base=2.0), SETTINGS) is not first  # another job's
    other = Values(backoff_max=5.0)
    assert policy_for(options, other).backoff_max == 5.0  # new settings, new policy
    assert policy_for(None, SETTINGS) is policy_for(None, SETTINGS)


def test_unrecoverable_is_never_retried_and_a_raising_predicate_counts_as_retryable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(exc: BaseException) -> bool:
        raise RuntimeError("predicate bug")

    assert not is_retryable(Unrecoverable("no"), None)
    assert not is_retryable(ValueError(), never)
    assert is_retryable(ValueError(), None)
    with caplog.at_level(logging.WARNING, logger="django_blamequeue.lifecycle"):
        assert is_retryable(ValueError(), broken)
    assert [r.name for r in caplog.records] == ["django_blamequeue.lifecycle"]


def test_the_lifecycle_decides_with_the_same_policy() -> None:
    assert lifecycle.Policy is RetryPolicy
    t = lifecycle.decide(
        lifecycle.Raised(ValueError("boom")),
        attempt=2,
        max_attempts=3,
        policy=RetryPolicy.of(JobOptions(backoff_base=3.0), SETTINGS),
    )
    assert t.delay == 6.0
