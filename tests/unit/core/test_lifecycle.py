"""The lifecycle rules of as tables over ``core.lifecycle.decide`` and ``rescue``."""

from __future__ import annotations

import pytest

from django_blamequeue import Unrecoverable
from django_blamequeue.core import lifecycle
from django_blamequeue.core.lifecycle import Policy, decide, rescue
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import Transition
from django_blamequeue.core.states import ALLOWED, TERMINAL, Reason, State, can_transition

POLICY = Policy()  # base 1 s, max 300 s, no jitter, no predicate


def raised(exc: BaseException) -> lifecycle.Raised:
    return lifecycle.Raised(exc, "Traceback (most recent call last): ...")


def test_success_is_done_with_the_result_and_does_not_yield_to_a_cancel() -> None:
    result = Encoded("application/json", "utf-8", b'{"sent": true}')
    t = decide(lifecycle.Succeeded(result), attempt=1, max_attempts=3, policy=POLICY)
    assert t == Transition(state=State.DONE, result=result, yields_to_cancel=False)


@pytest.mark.parametrize(("attempt", "delay"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0)])
def test_an_error_with_attempts_left_is_retried_after_the_backoff(
    attempt: int, delay: float
) -> None:
    t = decide(raised(ValueError("boom")), attempt=attempt, max_attempts=5, policy=POLICY)
    assert (t.state, t.delay, t.reason) == (State.PENDING, delay, Reason.ERROR)
    assert t.error == "ValueError: boom"
    assert t.traceback == "Traceback (most recent call last): ..."
    assert not t.give_back_attempt


def test_the_retry_delay_follows_the_policy() -> None:
    policy = Policy(backoff_base=10.0, backoff_max=25.0)
    delays = [
        decide(raised(ValueError()), attempt=n, max_attempts=9, policy=policy).delay
        for n in (1, 2, 3)
    ]
    assert delays == [10.0, 20.0, 25.0]


def test_jittered_retry_delay_is_within_the_unjittered_one() -> None:
    policy = Policy(backoff_base=8.0, backoff_jitter=True)
    delays = {
        decide(raised(ValueError()), attempt=2, max_attempts=3, policy=policy).delay
        for _ in range(200)
    }
    assert all(0.0 <= d <= 16.0 for d in delays) and len(delays) > 1


@pytest.mark.parametrize(("attempt", "max_attempts"), [(3, 3), (1, 1), (7, 5)])
def test_an_error_on_the_last_attempt_fails_the_job(attempt: int, max_attempts: int) -> None:
    t = decide(raised(KeyError("k")), attempt=attempt, max_attempts=max_attempts, policy=POLICY)
    assert (t.state, t.reason, t.delay) == (State.FAILED, Reason.ERROR, 0.0)
    assert t.error == "KeyError: 'k'"
    assert t.traceback


def test_unrecoverable_skips_the_remaining_budget() -> None:
    t = decide(raised(Unrecoverable("bad address")), attempt=1, max_attempts=10, policy=POLICY)
    assert (t.state, t.reason, t.error) == (
        State.FAILED,
        Reason.UNRECOVERABLE,
        "Unrecoverable: bad address",
    )


def test_unrecoverable_wins_even_over_a_predicate_that_says_retry() -> None:
    policy = Policy(retryable=lambda exc: True)
    t = decide(raised(Unrecoverable()), attempt=1, max_attempts=10, policy=policy)
    assert (t.state, t.reason) == (State.FAILED, Reason.UNRECOVERABLE)


def test_a_retryable_predicate_answering_false_skips_the_budget() -> None:
    seen: list[BaseException] = []
    exc = ConnectionError("refused")

    def predicate(e: BaseException) -> bool:
        seen.append(e)
        return False

    t = decide(raised(exc), attempt=1, max_attempts=10, policy=Policy(retryable=predicate))
    assert (t.state, t.reason) == (State.FAILED, Reason.NOT_RETRYABLE)
    assert seen == [exc]


def test_a_retryable_predicate_answering_true_keeps_the_budget() -> None:
    t = decide(
        raised(ValueError()), attempt=1, max_attempts=2, policy=Policy(retryable=lambda e: True)
    )
    assert (t.state, t.reason) == (State.PENDING, Reason.ERROR)


def test_a_retryable_predicate_that_raises_counts_as_retryable() -> None:
    def predicate(e: BaseException) -> bool:
        raise RuntimeError("predicate bug")

    t = decide(raised(ValueError()), attempt=1, max_attempts=2, policy=Policy(retryable=predicate))
    assert (t.state, t.reason, t.delay) == (State.PENDING, Reason.ERROR, 1.0)


@pytest.mark.parametrize(("attempt", "state"), [(1, State.PENDING), (2, State.FAILED)])
def test_a_timeout_fails_the_attempt_with_reason_timeout(attempt: int, state: State) -> None:
    t = decide(lifecycle.TimedOut(2.5), attempt=attempt, max_attempts=2, policy=POLICY)
    assert (t.state, t.reason) == (state, Reason.TIMEOUT)
    assert t.error is not None and "timeout" in t.error and "2.5" in t.error


def test_a_cancel_while_running_is_cancelled() -> None:
    t = decide(lifecycle.Cancelled(), attempt=1, max_attempts=3, policy=POLICY)
    assert (t.state, t.reason) == (State.CANCELLED, Reason.CANCELLED)


def test_a_graceful_release_gives_the_attempt_back_and_yields_to_a_cancel() -> None:
    t = decide(lifecycle.Released(), attempt=3, max_attempts=3, policy=POLICY)
    assert (t.state, t.give_back_attempt, t.delay) == (State.PENDING, True, 0.0)
    assert t.yields_to_cancel
    assert t.error is None


def test_a_job_that_cannot_run_here_fails_at_once() -> None:
    t = decide(lifecycle.BadJob("no handler"), attempt=1, max_attempts=5, policy=POLICY)
    assert (t.state, t.reason, t.error) == (State.FAILED, Reason.BAD_JOB, "no handler")


def test_a_fan_out_parks_the_parent_with_its_manifest() -> None:
    t = decide(lifecycle.FannedOut(()), attempt=1, max_attempts=3, policy=POLICY)
    assert t.state == State.WAITING_CHILDREN


@pytest.mark.parametrize(
    ("attempts", "max_attempts", "stalls", "max_stalled", "alone", "expected"),
    [
        (1, 3, 1, 1, False, State.PENDING),  # first stall, attempts left: back to pending
        (2, 3, 2, 1, True, State.FAILED),  # past MAX_STALLED_COUNT, running alone
        (2, 3, 2, 1, False, State.PENDING),  # past it, but in company: convicts nobody
        (2, 3, 9, 1, False, State.PENDING),
        (1, 3, 2, 2, True, State.PENDING),  # a higher MAX_STALLED_COUNT tolerates more
        (1, 3, 3, 2, True, State.FAILED),
        (3, 3, 1, 1, False, State.FAILED),  # the crash used the last attempt: not given back
        (1, 1, 1, 5, False, State.FAILED),
        (1, 3, 1, 0, False, State.FAILED),  # MAX_STALLED_COUNT 0: any stall fails, no probation
    ],
)
def test_rescue_table(
    attempts: int, max_attempts: int, stalls: int, max_stalled: int, alone: bool, expected: State
) -> None:
    kw = {"attempts": attempts, "max_attempts": max_attempts, "max_stalled": max_stalled}
    assert rescue(stalls=stalls, alone=alone, **kw) == expected


@pytest.mark.parametrize(
    ("stalls", "max_stalled", "expected"),
    [(0, 1, False), (1, 1, True), (2, 1, True), (1, 2, False), (2, 2, True), (5, 0, False)],
)
def test_a_job_is_on_probation_once_its_next_stall_may_dead_letter_it(
    stalls: int, max_stalled: int, expected: bool
) -> None:
    assert lifecycle.on_probation(stalls=stalls, max_stalled=max_stalled) is expected


def test_every_transition_decide_answers_is_allowed_from_inflight() -> None:
    outcomes: list[lifecycle.Outcome] = [
        lifecycle.Succeeded(None),
        raised(ValueError()),
        raised(Unrecoverable()),
        lifecycle.TimedOut(1),
        lifecycle.Cancelled(),
        lifecycle.Released(),
        lifecycle.BadJob("x"),
        lifecycle.FannedOut(()),
    ]
    for outcome in outcomes:
        for attempt in (1, 3):
            t = decide(outcome, attempt=attempt, max_attempts=3, policy=POLICY)
            assert can_transition(State.INFLIGHT, t.state), (outcome, t)


def test_terminal_states_are_final_except_the_dlq_retry() -> None:
    assert {s: ALLOWED[s] for s in TERMINAL} == {
        State.DONE: frozenset(),
        State.CANCELLED: frozenset(),
        State.FAILED: frozenset({State.PENDING}),
    }
