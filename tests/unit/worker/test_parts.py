"""The worker's parts that need no engine: stored texts, the ack queue that survives a refused
batch, probation (runs alone), and the lifecycle of ``Retry`` and of an unstorable ack."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import pytest
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import Retry, current_job
from django_blamequeue.backends.base import Backend
from django_blamequeue.core import lifecycle
from django_blamequeue.core.options import JobOptions
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import AckResult, Claimed, Transition
from django_blamequeue.core.states import Reason, State
from django_blamequeue.core.texts import MAX_ERROR, MAX_TRACEBACK, storable
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs.registry import JobDefinition
from django_blamequeue.worker.acks import MAX_REFUSALS, PendingAcks
from django_blamequeue.worker.batching import Gather
from django_blamequeue.worker.execution import Run, new_run, policy_for
from django_blamequeue.worker.probation import Probation

POLICY = lifecycle.Policy()


def run(job_id: str, stalls: int = 0) -> Run:
    c = Claimed(
        job_id=job_id,
        queue="q",
        name="unit.job",
        payload=Encoded("application/json", "utf-8", b"{}"),
        token=f"t-{job_id}",
        attempt=1,
        max_attempts=3,
        lease_expires_at=datetime.now(UTC),
        stalls=stalls,
    )
    return new_run(c, cast(Backend, None), 0.0, 30.0, 0.25)


# -- stored texts ----------------------------------------------------------------------------
def test_nul_and_lone_surrogates_are_escaped_so_every_engine_can_store_them() -> None:
    assert storable("a\x00b\udc80c", 100) == "a\\x00b\\udc80c"


def test_a_long_error_keeps_its_head_and_says_how_much_was_cut() -> None:
    text = storable("E" * 10_000_000, MAX_ERROR)
    assert len(text) == MAX_ERROR
    assert text.startswith("EEE") and text.endswith(
        f"… [{10_000_000 - MAX_ERROR + 29:,} more characters]"
    )


def test_a_long_traceback_keeps_its_head_and_its_tail() -> None:
    text = storable("head" + "m" * 1_000_000 + "ValueError: tail", MAX_TRACEBACK, keep_tail=True)
    assert len(text) == MAX_TRACEBACK
    assert text.startswith("head") and text.endswith("ValueError: tail")
    assert "characters cut" in text


def test_every_transition_stores_bounded_nul_free_texts() -> None:
    t = Transition(state=State.FAILED, error="x\x00" * 10_000, traceback="y" * 200_000)
    assert t.error is not None and "\x00" not in t.error and len(t.error) == MAX_ERROR
    assert t.traceback is not None and len(t.traceback) == MAX_TRACEBACK


# -- the ack queue ---------------------------------------------------------------------------
def transition(state: State = State.FAILED) -> Transition:
    return Transition(state=state, error="ValueError: boom", traceback="Traceback ...")


def test_acks_stay_until_applied_and_go_in_one_batch() -> None:
    acks = PendingAcks()
    runs = [run(f"j{i}") for i in range(3)]
    for r in runs:
        acks.add(r, transition())
    assert [a.job_id for a in acks.batch()] == ["j0", "j1", "j2"]
    done = acks.applied([AckResult(job_id="j1", ok=True, state=State.FAILED)])
    assert [(r.claimed.job_id, res.ok) for r, _, res in done] == [("j1", True)]
    assert [a.job_id for a in acks.batch()] == ["j0", "j2"] and len(acks) == 2


def test_a_refused_batch_is_taken_apart_and_its_refused_ack_sent_plain_then_given_up() -> None:
    acks = PendingAcks()
    for i in range(3):
        acks.add(run(f"j{i}"), transition(State.DONE if i == 1 else State.FAILED))
    refusal = ValueError("cannot store that")
    assert acks.refused(acks.batch(), refusal) == []
    assert acks.isolating and [a.job_id for a in acks.batch()] == ["j0"]
    acks.applied([AckResult(job_id="j0", ok=True, state=State.FAILED)])
    (suspect,) = acks.batch()
    assert suspect.job_id == "j1"
    assert acks.refused([suspect], refusal) == []  # once: sent again, plain
    (plain,) = acks.batch()
    assert plain.transition.state == State.FAILED  # a success whose result cannot be stored
    assert plain.transition.traceback is None
    assert "refused to store" in (plain.transition.error or "")
    given_up = []
    for _ in range(MAX_REFUSALS - 1):
        given_up += acks.refused(acks.batch(), refusal)
    assert [r.claimed.job_id for r, _ in given_up] == ["j1"]
    assert [a.job_id for a in acks.batch()] == ["j2"]  # the last suspect, alone too
    acks.applied([AckResult(job_id="j2", ok=True, state=State.FAILED)])
    acks.add(run("j3"), transition())
    acks.add(run("j4"), transition())
    assert not acks.isolating and [a.job_id for a in acks.batch()] == ["j3", "j4"]


def test_an_unstorable_retry_stays_a_retry_with_a_plain_note() -> None:
    t = Transition(
        state=State.PENDING, delay=4.0, error="é\x00", traceback="tb", reason=Reason.ERROR
    )
    plain = lifecycle.unstorable(t, ValueError("NUL \x00 in text"))
    assert (plain.state, plain.delay, plain.reason, plain.traceback) == (
        State.PENDING,
        4.0,
        Reason.ERROR,
        None,
    )
    assert plain.error is not None and plain.error.isascii()


# -- probation -------------------------------------------------------------------------------
def test_a_job_on_probation_waits_until_it_is_alone_then_runs_alone() -> None:
    probation = Probation(max_stalled=1)
    fresh, suspect, second = run("a"), run("b", stalls=1), run("c", stalls=1)
    running = {r.claimed.job_id: r for r in (fresh, suspect, second)}
    assert probation.admit([fresh, suspect, second]) == [fresh]
    assert suspect.deadline is None and probation.busy(running)
    assert probation.next(running) is None  # "a" still runs
    del running["a"]
    assert probation.next(running) is suspect
    probation.started(suspect)  # start_next marks its lease, then this
    assert probation.next(running) is None  # "b" runs alone: "c" waits
    del running["b"]
    assert probation.next(running) is second
    assert probation.release_all() == [second] and not probation.busy({})


def test_a_held_run_its_worker_no_longer_tracks_is_forgotten_and_claims_resume() -> None:
    probation = Probation(max_stalled=1)
    old, again = run("a", stalls=1), run("a", stalls=2)  # leased to this worker again
    running = {"a": old}
    assert probation.admit([old]) == [] and probation.busy(running)
    running["a"] = again  # the worker replaced the run it held back
    assert probation.admit([again]) == []
    assert probation.held == 2 and probation.next(running) is again  # alone: it may start
    probation.started(again)
    del running["a"]
    assert not probation.busy(running)  # nothing held back: the worker claims again


def test_no_probation_below_the_stall_limit_or_with_a_limit_of_zero() -> None:
    assert Probation(max_stalled=2).admit([run("a", stalls=1)])
    assert Probation(max_stalled=0).admit([run("a", stalls=7)])


# -- Retry -----------------------------------------------------------------------------------
def test_retry_spends_the_attempt_and_comes_back_after_its_own_delay() -> None:
    exc = Retry(delay=45, reason="the API said later")
    t = lifecycle.decide(lifecycle.Raised(exc, "tb"), attempt=1, max_attempts=3, policy=POLICY)
    assert (t.state, t.delay, t.give_back_attempt) == (State.PENDING, 45.0, False)
    assert t.error == "Retry: retry requested in 45 s: the API said later"


def test_retry_without_a_delay_takes_the_backoff_and_on_the_last_attempt_fails() -> None:
    t = lifecycle.decide(lifecycle.Raised(Retry(), ""), attempt=2, max_attempts=3, policy=POLICY)
    assert (t.state, t.delay) == (State.PENDING, 2.0)
    t = lifecycle.decide(lifecycle.Raised(Retry(5), ""), attempt=3, max_attempts=3, policy=POLICY)
    assert (t.state, t.reason) == (State.FAILED, Reason.ERROR)


@pytest.mark.parametrize("delay", [-1, float("nan"), float("inf"), True, "30"])
def test_a_retry_delay_that_is_not_seconds_is_refused(delay: Any) -> None:
    with pytest.raises(QueueError) as caught:
        Retry(delay=delay)
    assert caught.value.code == ErrorCode.BAD_ARGUMENT


def test_current_job_retry_raises_retry() -> None:
    from django_blamequeue.context import call_directly

    def handler() -> None:
        current_job().retry(30)

    with pytest.raises(Retry) as caught:
        call_directly(handler, (), {}, name="unit.job", queue="q")
    assert caught.value.delay == 30.0


# -- gathering finished runs for one round trip ------------------------------------------------
def test_the_round_trip_waits_at_most_the_window_while_few_slots_are_free() -> None:
    g = Gather(10, window=0.002)
    assert g.hold(free=1, running=9, now=100.0) == pytest.approx(0.002)
    assert g.hold(free=2, running=8, now=100.0015) == pytest.approx(0.0005)  # from the first
    assert g.hold(free=3, running=7, now=100.002) == 0.0  # the window is over: go
    assert g.hold(free=1, running=9, now=100.003) == pytest.approx(0.002)  # a new window


def test_no_wait_with_half_the_slots_free_nothing_running_or_nothing_free() -> None:
    g = Gather(10)
    assert g.hold(free=5, running=5, now=1.0) == 0.0
    assert g.hold(free=3, running=0, now=1.0) == 0.0  # nothing more will finish
    assert g.hold(free=0, running=10, now=1.0) == 0.0  # no round trip to hold
    assert Gather(1).hold(free=1, running=0, now=1.0) == 0.0
    assert Gather(2).hold(free=1, running=1, now=1.0) == 0.0  # one slot of two is enough


# -- the retry policy, built once per definition and settings --------------------------------
def test_the_retry_policy_is_reused_until_the_settings_or_the_definition_change(
    settings: SettingsWrapper,
) -> None:
    first = policy_for(None)
    assert policy_for(None) is first
    settings.BLAMEQUEUE = {"BACKOFF_BASE": 7}
    assert policy_for(None).backoff_base == 7.0
    own = JobDefinition(
        func=lambda: None, name="unit.own", options=JobOptions(queue="q", backoff_base=2.0)
    )
    assert policy_for(own).backoff_base == 2.0
    again = JobDefinition(
        func=lambda: None, name="unit.own", options=JobOptions(queue="q", backoff_max=9.0)
    )
    assert (policy_for(again).backoff_base, policy_for(again).backoff_max) == (7.0, 9.0)
