"""Claiming ahead: a few short jobs leased before a slot frees, started the moment one does.

A slot that finishes a run otherwise waits for the main thread's next round trip (the gather
window, then the ack-and-claim statement) before it has work again; with ORM jobs of a few
milliseconds at 10 slots that wait was the queue's largest cost against a plain thread pool
(docs/perf-notes.md, "The queue's cost on real jobs"). So while the recent runs are short, the
worker leases up to half its slots more than it has free; those runs hold a lease (renewed
like any other) but no slot, and each starts when a slot frees, without a round trip.

What a caller may rely on:

- ``concurrency`` still bounds the runs that execute at once: a waiting run has no thread and
  no task until a slot frees;
- a waiting run's ``timeout`` starts when it starts, not when it was claimed;
- only while runs are short (``SHORT_RUN``, a moving average): a waiting job never sits
  behind long runs in one worker while another worker idles; a worker with a rate limit, or
  of one slot, never claims ahead;
- and not while runs are shorter than a round trip to the database (``QUICK_RUN``): slots
  then free faster than a claim comes back, and claiming ahead only splits the batches
  (no-op jobs drained 42 % of ``ideal_pg.py``'s rate with it against 54 % without,
  docs/perf-notes.md);
- shutdown releases the waiting runs at once, their attempt given back, and a cancel or a
  lost lease takes a waiting run back before it starts. A crash (kill -9) leaves them to the
  sweeper like any leased job: re-pended when the lease ends, the stall counted.
"""

from __future__ import annotations

from collections import deque

from django_blamequeue.worker.execution import Run

#: Runs whose moving average of seconds is under this are short enough to claim ahead for.
SHORT_RUN = 0.1
#: ... and over this: a shorter run ends before a claim's round trip would come back.
QUICK_RUN = 0.001
#: Weight of the newest run in the moving average.
ALPHA = 0.2


class Ahead:
    """One consumer's runs leased ahead of its free slots (main thread only)."""

    def __init__(self, concurrency: int, *, enabled: bool) -> None:
        #: Runs leased beyond the free slots, at most: half the slots.
        self.cap = concurrency // 2 if enabled else 0
        self._waiting: deque[tuple[Run, float | None]] = deque()  # (run, its timeout)
        self._average: float | None = None  # seconds a run took, moving average

    @property
    def waiting(self) -> int:
        """Runs claimed ahead and not started: they hold a lease, not a slot."""
        return len(self._waiting)

    def room(self) -> int:
        """How many more runs to lease than there are free slots now."""
        a = self._average
        if not self.cap or a is None or not QUICK_RUN <= a < SHORT_RUN:
            return 0
        return max(0, self.cap - len(self._waiting))

    def ran(self, seconds: float) -> None:
        """A run ended after ``seconds`` (from its start)."""
        a = self._average
        self._average = seconds if a is None else a + ALPHA * (seconds - a)

    def admit(self, runs: list[Run], open_slots: int, now: float) -> list[Run]:
        """The runs to start now, behind those already waiting, as many as ``open_slots``;
        the rest wait, their timeout held back until they start."""
        if len(runs) <= open_slots and not self._waiting:
            return runs
        for run in runs:
            timeout = None if run.deadline is None else run.deadline - run.started
            run.deadline = None
            self._waiting.append((run, timeout))
        return self.due(open_slots, now)

    def due(self, open_slots: int, now: float) -> list[Run]:
        """Waiting runs to start in ``open_slots`` freed slots (monotonic ``now``), their
        start and timeout counted from now."""
        out: list[Run] = []
        while self._waiting and len(out) < open_slots:
            run, timeout = self._waiting.popleft()
            run.started = now
            run.deadline = None if timeout is None else now + timeout
            out.append(run)
        return out

    def discard(self, run: Run) -> bool:
        """Forget a waiting run (cancelled, lease lost); False if it was not waiting."""
        kept = deque(item for item in self._waiting if item[0] is not run)
        found = len(kept) < len(self._waiting)
        self._waiting = kept
        return found

    def release_all(self) -> list[Run]:
        """Shutdown: every waiting run, to be released without having run."""
        runs = [run for run, _ in self._waiting]
        self._waiting.clear()
        return runs
