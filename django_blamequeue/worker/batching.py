"""When the worker's next claim-and-ack round trip should wait a moment for more runs to end.

Slots free one or two at a time: a worker that makes its round trip as soon as one frees
claims and acks a couple of jobs a commit (2.7–4.6 at 10 slots, docs/perf-notes.md, lever 3),
and the queue's own statements and fsyncs cost more per job than most jobs. While fewer than
half the slots are free and runs are still going, the worker waits up to ``WINDOW`` for more
to finish, then makes one round trip for them all. Never longer: a finished job's ack and an
idle slot wait at most ``WINDOW`` (leases are seconds long; the ack still goes well within
one), and a worker whose slots are mostly free (a quiet queue, a worker of one or two slots)
never waits.
"""

from __future__ import annotations

#: The longest a finished run's ack or a free slot waits for company (seconds).
WINDOW = 0.002


class Gather:
    """The main thread's hold on its round trip; ``hold`` is asked once a round."""

    def __init__(self, slots: int, window: float = WINDOW) -> None:
        self.window = window
        #: Free slots worth a round trip at once: half of them (1 and 2 slots: always).
        self.enough = max(1, slots // 2)
        self._since: float | None = None  # when the current hold began (monotonic)

    def hold(self, free: int, running: int, now: float) -> float:
        """Seconds to wait before the round trip, ``free`` slots free and ``running`` runs
        going (monotonic ``now``); 0: go now."""
        if free <= 0 or free >= self.enough or running == 0:
            self._since = None
            return 0.0
        if self._since is None:
            self._since = now
        left = self._since + self.window - now
        if left <= 0:
            self._since = None
            return 0.0
        return left
