"""heartbeat: which runs time out, which leases are renewed (all due ones in one call, none
early), what the lease signals stop, and how long the main loop may wait. Time is passed in
(monotonic seconds); the engine is a stand-in that records what it was asked."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import cast

import pytest

from django_blamequeue.backends.base import Backend
from django_blamequeue.backends.resilience import Resilience
from django_blamequeue.core import lifecycle
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import Claimed, LeaseSignals
from django_blamequeue.exceptions import ErrorCode, JobCancelled, JobTimeout, LeaseLost, QueueError
from django_blamequeue.worker.execution import Run, new_run
from django_blamequeue.worker.heartbeat import SIGNAL_POLL, Heartbeat, Stop

LEASE = 30.0


class Engine:
    """What the heartbeat asks of a backend, answered from lists the test fills in."""

    alias = "stand-in"
    unavailable_errors: tuple[type[BaseException], ...] = (ConnectionError,)

    def __init__(self) -> None:
        self.resilience = Resilience(cast(Backend, self), retries=0)
        self.renewed: list[tuple[list[tuple[str, str]], float]] = []
        self.asked: list[list[tuple[str, str]]] = []
        self.lost: list[str] = []
        self.cancel_requested: list[str] = []
        self.down = False

    def renew_leases(self, leases: Sequence[tuple[str, str]], lease: float) -> list[str]:
        if self.down:
            raise ConnectionError("engine down")
        self.renewed.append((list(leases), lease))
        return list(self.lost)

    def lease_signals(self, leases: Sequence[tuple[str, str]]) -> LeaseSignals:
        if self.down:
            raise ConnectionError("engine down")
        self.asked.append(list(leases))
        return LeaseSignals(
            lost=frozenset(self.lost), cancel_requested=frozenset(self.cancel_requested)
        )

    def on_unavailable(self) -> None:
        pass


@pytest.fixture
def engine() -> Engine:
    return Engine()


@pytest.fixture
def heartbeat(engine: Engine) -> Heartbeat:
    return Heartbeat(cast(Backend, engine), LEASE)


def started(job_id: str, at: float, *, timeout: float | None = None) -> Run:
    """A run that started at monotonic ``at`` (its lease renewed half a lease later)."""
    c = Claimed(
        job_id=job_id,
        queue="q",
        name="tests.unit.heartbeat",
        payload=Encoded("application/json", "utf-8", b"null"),
        token=f"token-{job_id}",
        attempt=1,
        max_attempts=3,
        lease_expires_at=datetime.now(UTC),
        timeout=timeout,
    )
    return new_run(c, cast(Backend, None), at, LEASE, 0.25)


def running(*runs: Run) -> dict[str, Run]:
    return {r.claimed.job_id: r for r in runs}


def ids(stops: Iterable[Stop]) -> list[tuple[str, type[BaseException], object]]:
    return [(s.run.claimed.job_id, s.exc_type, s.outcome) for s in stops]


# -- deadlines -------------------------------------------------------------------------------
def test_a_run_times_out_at_its_deadline_and_not_before(heartbeat: Heartbeat) -> None:
    runs = running(started("short", 0.0, timeout=5.0), started("untimed", 0.0))
    assert heartbeat.deadlines(runs, 4.999) == []
    assert ids(heartbeat.deadlines(runs, 5.0)) == [("short", JobTimeout, lifecycle.TimedOut(5.0))]
    assert [s.run for s in heartbeat.deadlines(runs, 1e9)] == [runs["short"]]  # never untimed


# -- renewals --------------------------------------------------------------------------------
def test_no_lease_is_renewed_before_half_a_lease_has_passed(
    heartbeat: Heartbeat, engine: Engine
) -> None:
    runs = running(started("a", 0.0))
    assert heartbeat.renew(runs, LEASE / 2 - 0.001) == []
    assert engine.renewed == []  # not even asked


def test_every_lease_due_is_renewed_in_one_call_and_the_others_are_left(
    heartbeat: Heartbeat, engine: Engine
) -> None:
    old, older, young = started("old", 1.0), started("older", 0.0), started("young", 10.0)
    now = 16.0  # half a lease after "old" and "older" started, not after "young"
    assert heartbeat.renew(running(old, older, young), now) == []
    (call,) = engine.renewed
    assert sorted(call[0]) == [("old", "token-old"), ("older", "token-older")]
    assert call[1] == LEASE
    assert (old.lease_until, old.renew_at) == (now + LEASE, now + LEASE / 2)
    assert (young.lease_until, young.renew_at) == (10.0 + LEASE, 10.0 + LEASE / 2)


def test_a_lease_lost_at_renewal_stops_its_run_with_nothing_to_ack(
    heartbeat: Heartbeat, engine: Engine
) -> None:
    runs = running(started("kept", 0.0), started("taken", 0.0))
    engine.lost = ["taken", "finished-meanwhile"]  # an id no longer running is ignored
    assert ids(heartbeat.renew(runs, LEASE / 2)) == [("taken", LeaseLost, None)]


def test_an_unreachable_engine_raises_and_the_leases_stay_due(
    heartbeat: Heartbeat, engine: Engine
) -> None:
    run = started("a", 0.0)
    engine.down = True
    with pytest.raises(QueueError) as caught:
        heartbeat.renew(running(run), LEASE / 2)
    assert caught.value.code == ErrorCode.BACKEND_UNAVAILABLE
    assert run.renew_at == LEASE / 2  # nothing was lost: the next round asks again
    engine.down = False
    assert heartbeat.renew(running(run), LEASE / 2 + 1) == []
    assert [leases for leases, _ in engine.renewed] == [[("a", "token-a")]]


# -- lease signals ---------------------------------------------------------------------------
def test_signals_stop_cancelled_runs_to_ack_as_cancelled_and_lost_ones_with_nothing(
    heartbeat: Heartbeat, engine: Engine
) -> None:
    runs = running(started("asked", 0.0), started("taken", 0.0), started("calm", 0.0))
    engine.cancel_requested = ["asked", "gone"]
    engine.lost = ["taken"]
    assert ids(heartbeat.signals(runs, 0.0)) == [
        ("asked", JobCancelled, lifecycle.Cancelled()),
        ("taken", LeaseLost, None),
    ]
    assert sorted(engine.asked[0]) == [
        ("asked", "token-asked"),
        ("calm", "token-calm"),
        ("taken", "token-taken"),
    ]


def test_signals_are_asked_about_once_per_poll_and_never_with_nothing_running(
    heartbeat: Heartbeat, engine: Engine
) -> None:
    assert heartbeat.signals({}, 0.0) == []
    runs = running(started("a", 0.0))
    heartbeat.signals(runs, 0.0)
    heartbeat.signals(runs, SIGNAL_POLL - 0.001)
    assert len(engine.asked) == 1
    heartbeat.signals(runs, SIGNAL_POLL)
    assert len(engine.asked) == 2


# -- the main loop's wait --------------------------------------------------------------------
def test_the_main_loop_waits_until_the_next_deadline_renewal_or_signal_poll(
    heartbeat: Heartbeat,
) -> None:
    assert heartbeat.next_due({}, 0.0) == float("inf")
    timed = started("timed", 0.0, timeout=4.0)
    runs = running(timed, started("plain", 1.5))
    heartbeat.signals(runs, 0.0)  # the next poll is due at SIGNAL_POLL
    assert heartbeat.next_due(runs, 0.5) == pytest.approx(SIGNAL_POLL - 0.5)
    heartbeat.signals(runs, 3.5)  # next poll at 4.5
    assert heartbeat.next_due(runs, 3.5) == pytest.approx(0.5)  # the timeout at 4
    assert heartbeat.next_due(runs, 99.0) == 0.0  # overdue: at once, never negative
    del runs["timed"]
    heartbeat.signals(runs, 16.0)
    assert heartbeat.next_due(runs, 16.0) == pytest.approx(0.5)  # "plain" renews at 16.5
