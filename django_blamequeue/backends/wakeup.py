"""Process-local wake-ups: an enqueue committed in this process wakes its idle consumers.

Cross-process wake-ups are the backend's business (LISTEN/NOTIFY); this only saves a poll
interval when producer and consumer share a process (tests, ``make demo``, SQLite).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

_lock = threading.Lock()
_waiters: dict[str, set[threading.Event]] = {}
_control_epoch = 0


def register(queues: Iterable[str], event: threading.Event) -> None:
    with _lock:
        for q in queues:
            _waiters.setdefault(q, set()).add(event)


def unregister(queues: Iterable[str], event: threading.Event) -> None:
    with _lock:
        for q in queues:
            _waiters.get(q, set()).discard(event)


def notify(queues: Iterable[str]) -> None:
    with _lock:
        events = [e for q in set(queues) for e in _waiters.get(q, ())]
    for e in events:
        e.set()


def control_changed(queues: Iterable[str]) -> None:
    """A queue was paused, resumed or limited in this process: consumers re-read their
    control state (``control_epoch`` moved) and wake at once."""
    global _control_epoch
    with _lock:
        _control_epoch += 1
    notify(queues)


def control_epoch() -> int:
    """Grows with every ``control_changed`` in this process."""
    return _control_epoch
