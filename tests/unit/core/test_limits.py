"""The control plane's rules as tables: what a claim may take under limits (rule: limits),
how long a job without a handler waits, and the snooze and hand-back transitions."""

from __future__ import annotations

import pytest

from django_blamequeue.core import lifecycle
from django_blamequeue.core.controls import QueueLimits
from django_blamequeue.core.limits import (
    HANDBACK_KNOWN,
    HANDBACK_MAX,
    HANDBACK_MIN,
    InFlight,
    claimable,
    handback_delay,
    room,
    saturated,
)
from django_blamequeue.core.states import Reason, State

JOBS = [("j1", "a"), ("j2", "a"), ("j3", "b"), ("j4", None), ("j5", "c"), ("j6", "b")]


@pytest.mark.parametrize(
    ("limits", "counted", "limit", "taken"),
    [
        (QueueLimits(), InFlight(), 10, ["j1", "j2", "j3", "j4", "j5", "j6"]),
        (QueueLimits(), InFlight(), 2, ["j1", "j2"]),
        (QueueLimits(concurrency=3), InFlight(jobs=1), 10, ["j1", "j2"]),
        (QueueLimits(concurrency=3), InFlight(jobs=5), 10, []),
        # a full key is skipped, never a reason to stop; keyless jobs are not per-key limited
        (QueueLimits(key_concurrency=1), InFlight(), 10, ["j1", "j3", "j4", "j5"]),
        (QueueLimits(key_concurrency=1), InFlight(by_key={"a": 1}), 10, ["j3", "j4", "j5"]),
        (
            QueueLimits(key_concurrency=2),
            InFlight(by_key={"b": 1}),
            10,
            ["j1", "j2", "j3", "j4", "j5"],
        ),
        (QueueLimits(rate_limit=(3, 1.0)), InFlight(starts=1), 10, ["j1", "j2"]),
        (
            QueueLimits(key_rate_limit=(1, 1.0)),
            InFlight(starts_by_key={"c": 1}),
            10,
            ["j1", "j3", "j4"],
        ),
        (QueueLimits(concurrency=2, key_concurrency=1), InFlight(), 10, ["j1", "j3"]),
    ],
)
def test_claimable(limits: QueueLimits, counted: InFlight, limit: int, taken: list[str]) -> None:
    assert claimable(JOBS, limit=limit, limits=limits, counted=counted) == taken


def test_room_is_never_negative_when_more_run_than_a_lowered_limit_allows() -> None:
    assert room(10, QueueLimits(concurrency=2), InFlight(jobs=7)) == 0


def test_saturated_keys_are_those_at_either_per_key_limit() -> None:
    limits = QueueLimits(key_concurrency=2, key_rate_limit=(3, 1.0))
    counted = InFlight(by_key={"a": 2, "b": 1}, starts_by_key={"b": 3, "c": 1})
    assert saturated(limits, counted, ["a", "b", "c", "d"]) == {"a", "b"}


def test_a_job_another_live_worker_can_run_is_offered_again_at_once() -> None:
    assert handback_delay(3600, known_elsewhere=True) == HANDBACK_KNOWN


@pytest.mark.parametrize(("age", "delay"), [(0, HANDBACK_MIN), (200, 20.0), (10**6, HANDBACK_MAX)])
def test_a_job_no_live_worker_can_run_waits_longer_the_older_it_is(
    age: float, delay: float
) -> None:
    assert handback_delay(age, known_elsewhere=False) == delay


POLICY = lifecycle.Policy(max_snoozes=3, missing_handler_timeout=100.0)


def test_a_snooze_is_pending_again_with_the_attempt_given_back() -> None:
    t = lifecycle.decide(lifecycle.Snoozed(30), attempt=2, max_attempts=2, policy=POLICY, snoozes=2)
    assert (t.state, t.delay, t.give_back_attempt, t.snoozed, t.reason) == (
        State.PENDING,
        30,
        True,
        True,
        Reason.SNOOZED,
    )


def test_the_snooze_past_max_snoozes_fails_the_job() -> None:
    t = lifecycle.decide(lifecycle.Snoozed(30), attempt=1, max_attempts=5, policy=POLICY, snoozes=3)
    assert (t.state, t.reason, t.give_back_attempt) == (
        State.FAILED,
        Reason.SNOOZED_TOO_OFTEN,
        False,
    )


@pytest.mark.parametrize(
    ("age", "elsewhere", "state"),
    [(5, False, State.PENDING), (500, True, State.PENDING), (500, False, State.FAILED)],
)
def test_a_job_without_a_handler_fails_only_once_no_worker_had_one_for_too_long(
    age: float, elsewhere: bool, state: State
) -> None:
    outcome = lifecycle.NoHandler(name="app.new", age=age, known_elsewhere=elsewhere)
    t = lifecycle.decide(outcome, attempt=1, max_attempts=1, policy=POLICY)
    assert (t.state, t.reason) == (state, Reason.NO_HANDLER)
    assert t.give_back_attempt is (state == State.PENDING)
    assert "app.new" in (t.error or "")
