"""interrupt.Guard: the worker raises ``JobInterrupted`` in a handler thread, and only while
that thread is inside the handler (``enter`` … ``leave``). Every wait here is an event or a
poll with a deadline: a broken guard fails a test, it never hangs one."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from django_blamequeue.exceptions import JobInterrupted, JobTimeout, LeaseLost
from django_blamequeue.worker import interrupt
from django_blamequeue.worker.interrupt import Guard

WAIT = 10.0
#: How soon a pure-Python loop must stop (it is at its next bytecode boundary at once; the
#: margin is for a loaded machine).
PROMPTLY = 2.0


def wait_until(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def spin(seconds: float) -> int:
    """Pure Python for ``seconds``: an exception pending for this thread lands in here."""
    until = time.monotonic() + seconds
    n = 0
    while time.monotonic() < until:
        n += 1
    return n


class Slot:
    """A slot thread: ``body`` runs inside the guard; what it raised or returned is kept."""

    def __init__(self, guard: Guard, body: Callable[[], Any]) -> None:
        self.guard = guard
        self.body = body
        self.inside = threading.Event()
        self.raised: BaseException | None = None
        self.escaped: BaseException | None = None  # raised after leave(): must never happen
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.guard.enter()
            try:
                self.inside.set()
                self.body()
            except JobInterrupted as exc:
                self.raised = exc
            finally:
                self.guard.leave()
            spin(0.02)
        except JobInterrupted as exc:
            self.escaped = exc

    def start(self) -> Slot:
        self.thread.start()
        assert self.inside.wait(WAIT)
        return self

    def join(self) -> None:
        self.thread.join(WAIT)
        assert not self.thread.is_alive()


def test_an_interrupt_stops_a_pure_python_busy_loop_promptly() -> None:
    stopped: list[float] = []

    def busy() -> None:
        try:
            spin(WAIT)
        finally:
            stopped.append(time.monotonic())

    slot = Slot(Guard(), busy).start()
    sent = time.monotonic()
    assert slot.guard.interrupt(JobTimeout) is True
    slot.join()
    assert type(slot.raised) is JobTimeout
    assert stopped[0] - sent < PROMPTLY
    assert slot.escaped is None


def test_a_handlers_except_exception_cannot_swallow_the_interrupt() -> None:
    swallowed: list[BaseException] = []

    def careless() -> None:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                spin(0.001)
            except Exception as exc:  # what handlers write; JobInterrupted is not an Exception
                swallowed.append(exc)

    slot = Slot(Guard(), careless).start()
    assert slot.guard.interrupt(LeaseLost)
    slot.join()
    assert type(slot.raised) is LeaseLost and swallowed == []


def test_interrupt_after_leave_answers_false_and_raises_nothing_in_the_thread() -> None:
    guard = Guard()
    left = threading.Event()
    checked = threading.Event()
    after: list[str] = []

    def slot_thread() -> None:
        guard.enter()
        guard.leave()
        left.set()
        try:
            assert checked.wait(WAIT)
            spin(0.05)  # anything injected would land here
            after.append("ran on")
        except JobInterrupted:
            after.append("interrupted after leave")

    thread = threading.Thread(target=slot_thread, daemon=True)
    thread.start()
    assert left.wait(WAIT)
    assert guard.interrupt(JobTimeout) is False
    checked.set()
    thread.join(WAIT)
    assert after == ["ran on"]


def test_a_guard_never_entered_touches_no_thread() -> None:
    others = threading.Event()
    result: list[str] = []

    def bystander() -> None:
        try:
            others.set()
            spin(0.1)
            result.append("ran on")
        except JobInterrupted:
            result.append("interrupted")

    thread = threading.Thread(target=bystander, daemon=True)
    thread.start()
    assert others.wait(WAIT)
    assert Guard().interrupt(JobTimeout) is False  # not the caller, not the bystander
    spin(0.01)
    thread.join(WAIT)
    assert result == ["ran on"]


def test_only_the_thread_inside_the_guard_is_interrupted() -> None:
    neighbour_done: list[str] = []
    release = threading.Event()

    def neighbour() -> None:  # runs beside the slot, in no guard
        try:
            assert release.wait(WAIT)
            spin(0.02)
            neighbour_done.append("ran on")
        except JobInterrupted:
            neighbour_done.append("interrupted")

    other = threading.Thread(target=neighbour, daemon=True)
    other.start()
    slot = Slot(Guard(), lambda: spin(WAIT)).start()
    assert slot.guard.interrupt(JobTimeout)
    slot.join()
    release.set()
    other.join(WAIT)
    assert type(slot.raised) is JobTimeout and neighbour_done == ["ran on"]


def test_an_interrupt_racing_with_leave_is_swallowed_and_never_escapes_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker's ``interrupt`` holds the guard's lock while the handler returns and calls
    ``leave``: the exception is injected while that thread waits for the lock, so it is
    pending when ``leave`` gets it. ``leave`` must take it there, not let it out."""
    guard = Guard()
    entered = threading.Event()
    returning = threading.Event()  # the handler is done; the thread heads for leave()
    seen: list[str] = []

    def slot_thread() -> None:
        try:
            guard.enter()
            entered.set()
            assert returning.wait(WAIT)  # a C wait: nothing is pending yet
            guard.leave()
            spin(0.05)  # a pending exception would land here
            seen.append("ran on")
        except JobInterrupted:
            seen.append("escaped")

    thread = threading.Thread(target=slot_thread, daemon=True)
    real = interrupt._set_async_exc

    def in_leave() -> bool:
        """The thread is inside ``leave``, past its first instruction (blocked on the lock)."""
        frame = sys._current_frames().get(thread.ident or 0)
        code = Guard.leave.__code__
        return frame is not None and frame.f_code is code and frame.f_lineno > code.co_firstlineno

    def inject_once_the_thread_is_in_leave(tid: Any, exc: Any) -> int:
        if exc is not None:  # interrupt(), under the guard's lock; None is leave()'s clear
            returning.set()
            wait_until(in_leave)
        return int(real(tid, exc))

    monkeypatch.setattr(interrupt, "_set_async_exc", inject_once_the_thread_is_in_leave)
    thread.start()
    assert entered.wait(WAIT)
    assert guard.interrupt(JobTimeout) is True  # the thread was still inside
    thread.join(WAIT)
    assert not thread.is_alive()
    assert seen == ["ran on"]
    assert guard.interrupt(JobTimeout) is False  # and it is outside now
