"""counters: what each applied ack adds to a worker's summary, and the window of handler
starts that its own ``--rate-limit`` counts (monotonic time passed in, never read)."""

from __future__ import annotations

import dataclasses

import pytest

from django_blamequeue.core.states import State
from django_blamequeue.worker.counters import Counters, StartWindow

COUNTED = [f.name for f in dataclasses.fields(Counters) if f.name not in ("claimed", "started_at")]


@pytest.mark.parametrize(
    ("ok", "state", "flags", "counted"),
    [
        (False, None, {}, "lock_lost"),
        (False, State.DONE, {}, "lock_lost"),  # a refused ack counts as lost, whatever it says
        (True, State.DONE, {}, "done"),
        (True, State.FAILED, {}, "failed"),
        (True, State.CANCELLED, {}, "cancelled"),
        (True, State.PENDING, {}, "retried"),
        (True, State.PENDING, {"released": True}, "released"),
        (True, State.PENDING, {"snoozed": True}, "snoozed"),
        (True, State.PENDING, {"handed_back": True}, "handed_back"),
        (True, State.PENDING, {"snoozed": True, "released": True}, "snoozed"),
    ],
)
def test_each_acked_attempt_counts_once_under_what_became_of_it(
    ok: bool, state: State | None, flags: dict[str, bool], counted: str
) -> None:
    c = Counters()
    c.count(ok, state, **flags)
    c.count(ok, state, **flags)
    assert {name: getattr(c, name) for name in COUNTED if getattr(c, name)} == {counted: 2}


def test_without_a_limit_there_is_always_room_and_nothing_to_wait_for() -> None:
    window = StartWindow(None)
    for t in range(1000):
        window.started(float(t))
    assert window.room(0.0) >= 1 << 30
    assert window.next_room(0.0) == float("inf")


def test_the_window_has_room_for_max_starts_per_period() -> None:
    window = StartWindow((3, 10.0))
    assert window.room(0.0) == 3
    assert window.next_room(0.0) == float("inf")  # nothing started: nothing to wait for
    for t in (0.0, 1.0, 2.0):
        window.started(t)
    assert window.room(2.0) == 0
    assert window.next_room(4.0) == pytest.approx(6.0)  # the start at 0 leaves at 10


def test_a_start_leaves_the_window_exactly_one_period_later() -> None:
    window = StartWindow((2, 10.0))
    window.started(0.0)
    window.started(5.0)
    assert window.room(9.999) == 0
    assert window.room(10.0) == 1  # the start at 0 is out
    assert window.next_room(10.0) == pytest.approx(5.0)  # the one at 5 leaves at 15
    assert window.room(15.0) == 2


def test_next_room_never_answers_zero_so_a_waiting_loop_cannot_spin() -> None:
    window = StartWindow((1, 10.0))
    window.started(0.0)
    assert window.next_room(10.0) == 0.001
    assert window.next_room(25.0) == 0.001  # not asked about room since: still positive
