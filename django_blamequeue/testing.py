"""Helpers for tests, ours and users': capture audit events and wait on them, not on clocks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .audit import Event
from .signals import audit_event


class CapturedEvents:
    """Audit events as they are sent (after commit), with a poll-free ``wait_for``."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._cond = threading.Condition()

    def _receive(self, sender: Any, event: Event, **kwargs: Any) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def actions(self, job_id: str | None = None) -> list[str]:
        with self._cond:
            return [e.action for e in self.events if job_id is None or e.job_id == job_id]

    def of(self, action: str) -> list[Event]:
        with self._cond:
            return [e for e in self.events if e.action == action]

    def wait_for(self, predicate: Callable[[list[Event]], bool], timeout: float = 10.0) -> bool:
        """Block until ``predicate(events)`` holds; False at the deadline."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.events):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def wait_for_action(self, action: str, job_id: str | None = None, count: int = 1,
                        timeout: float = 10.0) -> bool:  # fmt: skip
        return self.wait_for(
            lambda evs: sum(1 for e in evs if e.action == action
                            and (job_id is None or e.job_id == job_id)) >= count,
            timeout,
        )  # fmt: skip


@contextmanager
def capture_events() -> Iterator[CapturedEvents]:
    captured = CapturedEvents()
    audit_event.connect(captured._receive, weak=False)
    try:
        yield captured
    finally:
        audit_event.disconnect(captured._receive)


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.01) -> bool:
    """Poll ``predicate`` until true or the deadline; for state that sends no event."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
