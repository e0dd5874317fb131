"""What a worker did, counted (its progress line and exit summary read these), and the window
of handler starts its local ``--rate-limit`` counts."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from django_blamequeue.core.states import State


@dataclass(kw_only=True)
class Counters:
    claimed: int = 0
    done: int = 0
    retried: int = 0
    failed: int = 0
    cancelled: int = 0
    released: int = 0
    lock_lost: int = 0
    timed_out: int = 0
    snoozed: int = 0
    handed_back: int = 0  # jobs without a handler here, handed back (no attempt spent)
    started_at: float = field(default_factory=time.monotonic)

    @classmethod
    def total(cls, many: Sequence[Counters]) -> Counters:
        """The sum of several consumers' counts: one process serving several backends shows
        one progress line."""
        if len(many) == 1:
            return many[0]
        summed = cls(started_at=min((c.started_at for c in many), default=time.monotonic()))
        for f in fields(cls):
            if f.name != "started_at":
                setattr(summed, f.name, sum(getattr(c, f.name) for c in many))
        return summed

    def count(
        self,
        ok: bool,
        state: State | None,
        *,
        released: bool = False,
        snoozed: bool = False,
        handed_back: bool = False,
    ) -> None:
        """One acked attempt: ``ok`` False is a refused ack (another worker took it over);
        ``released`` says a pending answer gave the attempt back (a graceful release),
        ``snoozed`` / ``handed_back`` say why when it was a snooze or a hand-back."""
        if not ok:
            self.lock_lost += 1
        elif state == State.PENDING and snoozed:
            self.snoozed += 1
        elif state == State.PENDING and handed_back:
            self.handed_back += 1
        elif state == State.DONE:
            self.done += 1
        elif state == State.FAILED:
            self.failed += 1
        elif state == State.CANCELLED:
            self.cancelled += 1
        elif state == State.PENDING and released:
            self.released += 1
        elif state == State.PENDING:
            self.retried += 1


class StartWindow:
    """Handler starts within the last ``per`` seconds, for a worker's own ``--rate-limit``
    (``(max, per)``; None: no limit). Monotonic time."""

    def __init__(self, limit: tuple[int, float] | None) -> None:
        self.limit = limit
        self._starts: deque[float] = deque()

    def room(self, now: float) -> int:
        """How many more may start now."""
        if self.limit is None:
            return 1 << 30
        most, per = self.limit
        while self._starts and self._starts[0] <= now - per:
            self._starts.popleft()
        return most - len(self._starts)

    def started(self, now: float) -> None:
        if self.limit is not None:
            self._starts.append(now)

    def next_room(self, now: float) -> float:
        """Seconds until the oldest start leaves the window (inf: nothing to wait for)."""
        if self.limit is None or not self._starts:
            return float("inf")
        return max(0.001, self._starts[0] + self.limit[1] - now)
