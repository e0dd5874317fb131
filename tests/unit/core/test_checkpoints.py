"""Checkpoint values (JSON, capped) and the slot that hands them from a handler to the writer."""

from __future__ import annotations

import math
from typing import Any

import pytest

from django_blamequeue.core.checkpoints import MAX_CHECKPOINT_BYTES, CheckpointSlot, decode, encode
from django_blamequeue.exceptions import ErrorCode, QueueError


@pytest.mark.parametrize(
    "value", [None, 0, 3.5, "é", [1, "a"], {"offset": 7000, "ids": [1, 2]}, True]
)
def test_a_json_value_round_trips(value: Any) -> None:
    assert decode(encode(value)) == value


@pytest.mark.parametrize(
    "value",
    [object(), {1, 2}, math.nan, math.inf, b"bytes", "\x00", "\ud800", "DEEP"],
    ids=["object", "set", "nan", "inf", "bytes", "nul", "surrogate", "deep"],
)
def test_what_is_not_json_is_refused_as_bad_checkpoint(value: Any) -> None:
    with pytest.raises(QueueError) as caught:
        encode(deep() if value == "DEEP" else value)
    assert caught.value.code == ErrorCode.BAD_CHECKPOINT


def deep() -> Any:
    value: Any = 0
    for _ in range(101):
        value = [value]
    return value


def test_the_cap_counts_utf8_bytes_of_the_json_text() -> None:
    fits = "é" * ((MAX_CHECKPOINT_BYTES - 2) // 2)  # 2 bytes each, plus the quotes
    assert len(encode(fits).encode()) == MAX_CHECKPOINT_BYTES
    with pytest.raises(QueueError) as caught:
        encode(fits + "é")
    assert caught.value.code == ErrorCode.CHECKPOINT_TOO_LARGE
    assert "65,536" in caught.value.message


def test_the_latest_value_wins_and_the_writer_is_told_once_per_held_value() -> None:
    told: list[bool] = []
    slot = CheckpointSlot(notify=lambda _s, wait: told.append(wait))
    slot.put("1")
    slot.put("2")
    assert told == [False]  # one notification while a value is held
    assert slot.take() == ("2", [])
    assert slot.take() is None
    slot.put("3")
    assert told == [False, False]


def test_a_waiter_resolves_when_its_value_or_a_later_one_is_written() -> None:
    told: list[bool] = []
    slot = CheckpointSlot(notify=lambda _s, wait: told.append(wait))
    first = slot.put("1", wait=True)
    second = slot.put("2", wait=True)
    assert told == [True, True] and first is not None and second is not None
    text, waiters = slot.take() or ("", [])
    assert text == "2" and waiters == [first, second]


def test_a_value_that_could_not_be_sent_is_held_again_unless_a_later_one_came() -> None:
    slot = CheckpointSlot(notify=lambda _s, _w: None)
    slot.put("1")
    text, waiters = slot.take() or ("", [])
    slot.give_back(text, waiters)
    assert slot.take() == ("1", [])
    slot.put("2")
    taken = slot.take()
    slot.put("3")
    assert taken is not None
    slot.give_back(*taken)
    assert slot.take() == ("3", [])


def test_after_the_attempt_ends_values_are_dropped_and_waiters_answered_false() -> None:
    slot = CheckpointSlot(notify=lambda _s, _w: None)
    slot.put("last")
    assert slot.take(close=True) == ("last", [])
    assert slot.put("late") is None
    waiter = slot.put("late", wait=True)
    assert waiter is not None and waiter.result() is False
    assert slot.take() is None


def test_a_slot_with_a_writer_writes_waited_values_itself() -> None:
    written: list[str] = []
    slot = CheckpointSlot(writer=lambda text: written.append(text) or True)
    slot.put("held")
    waiter = slot.put("now", wait=True)
    assert waiter is not None and waiter.result() is True
    assert written == ["now"] and slot.take() is None  # the later value superseded the held one


def test_an_async_def_job_cannot_be_atomic() -> None:
    from django_blamequeue import job

    async def fetch(payload: Any) -> None:
        return None

    with pytest.raises(QueueError) as caught:
        job(queue="q", name="tests.unit.async_atomic", atomic=True)(fetch)
    assert caught.value.code == ErrorCode.INVALID_HANDLER
    assert "atomic=True needs a sync handler" in caught.value.message


def test_a_worker_run_gets_its_slot_at_its_first_checkpoint_and_none_after_its_end() -> None:
    """Most jobs take no checkpoint: no slot is made for them. One made at the first value
    tells the checkpointer; an attempt that ended without one drops later values (a handler
    still running after its run was abandoned), answering a waiter False at once."""
    import threading
    from typing import cast

    from django_blamequeue.backends.base import Backend
    from django_blamequeue.worker.checkpoint_writer import Checkpointer
    from tests.unit.worker.test_parts import run

    wake = threading.Event()
    checkpointer = Checkpointer(cast(Backend, None), 1.0, wake)
    taking, silent = run("taking"), run("silent")
    checkpointer.attach(taking)
    checkpointer.attach(silent)
    assert taking.ctx.checkpoints is None and silent.ctx.checkpoints is None

    taking.ctx._slot().put("first")
    assert wake.is_set() and taking.ctx.checkpoints is not None
    checkpointer.end(taking, keep=True)
    assert [(r.claimed.job_id, text) for r, text, _ in checkpointer._final] == [("taking", "first")]

    wake.clear()
    checkpointer.end(silent, keep=False)
    waiter = silent.ctx._slot().put("late", wait=True)
    assert waiter is not None and waiter.result(timeout=0) is False
    assert not wake.is_set()
