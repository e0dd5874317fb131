"""Where a PostgreSQL worker's next claim starts reading the claim index while claims are slow.

Every claim and ack leaves a dead version of the row behind it. Autovacuum removes them, but
not while a transaction somewhere holds the xmin horizon back (a session idle in a
transaction, a long REPEATABLE READ report, a replica with ``hot_standby_feedback``). Until
then each claimed job keeps its entry in the claim index, and a claim that reads the index
from the start fetches the row behind every one of them before it reaches a pending job: a
claim costs as much as the jobs claimed since the horizon was pinned, and the queue falls
behind (docs/perf-notes.md, "Claims onward while the horizon is pinned").

So while a claim from the start is slow, a worker starts each queue's next claim after the
last job it claimed there, in claim order (priority, then ``available_at``, then id): it reads
the higher priorities from the start (a new urgent job goes first), its own priority onward
from that point, then the lower priorities — skipping the dead entries behind it.

The point moves with each claim (after a claim of more urgent jobs it sits among them; the
next claim then reads the lower priorities from the start once).

A job can sort before that point and still be pending: one enqueued in a transaction that
committed late, or with a ``run_at`` in the past, or skipped while another worker held its
lock. A claim from the start still runs at least every second (more seldom the slower it
is: at most 5 % of the time goes to it), so such a job waits at most that long. The point is
only where a read starts: the claim's locks, fences and rules are the same, so any point,
however stale, is safe. A claim from the start that is fast again turns this off.

That claim from the start holds the worker's round while it reads every dead entry (a second
and more after ten minutes of a pinned horizon). Where the worker runs a sweeper, its scout
(``sweeper/claim_scout.py``) does that read instead, off the round on the sweeper's own
connection and without a lock: it looks up the first claimable job of each queue from the
start and, when one sorts before the point, moves the point back to just before it, so the
next claim (onward) takes it. While the scout keeps up, the round claims onward only; if it
stops, the round's claims from the start fall due again. A fast scout read turns claiming
onward off, as a fast claim does. A claim noting its point while the scout moves it back may
overwrite that move: the job then waits for the scout's next pass, not longer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from datetime import datetime

from django_blamequeue.core.records import Claimed

#: While claiming onward, a claim from the start runs at least this often, and at most
#: ``1 / GAP_RATIO`` of the time.
MIN_GAP_S = 1.0
GAP_RATIO = 20.0


class ClaimStart:
    """The last job claimed per queue, and when the next claim from the start is due."""

    def __init__(self, slow_ms: float | None = 5.0) -> None:
        #: A claim from the start slower than this turns claiming onward on (None: never). A
        #: claim of a few jobs on an index without dead entries takes well under 1 ms.
        self.slow_s = None if slow_ms is None else slow_ms / 1000.0
        self.after: dict[str, tuple[int, datetime, str]] = {}
        self.full_due_at = 0.0  # monotonic; 0: every claim reads from the start
        self._lock = threading.Lock()  # the worker's claims and the sweeper's scout

    @property
    def onward(self) -> bool:
        return self.full_due_at > 0.0

    def points(self, queues: Sequence[str], now: float | None = None) -> Points | None:
        """The points ``queues`` are claimed after (None where a queue has none: read it from the
        start), or None when this claim reads every queue from the start."""
        if not self.full_due_at or (time.monotonic() if now is None else now) >= self.full_due_at:
            return None
        prios: list[int | None] = []
        times: list[datetime | None] = []
        ids: list[str | None] = []
        for q in queues:
            p = self.after.get(q)
            prios.append(p[0] if p else None)
            times.append(p[1] if p else None)
            ids.append(p[2] if p else None)
        return Points(prios, times, ids)

    def note(
        self,
        claimed: Sequence[Claimed],
        elapsed: float,
        *,
        from_start: bool,
        now: float | None = None,
    ) -> None:
        """Remember the last job of this claim per queue (the next claim there starts after
        it); after a claim from the start, turn claiming onward on (it took ``elapsed`` ≥
        ``slow_s``) or off."""
        last: dict[str, tuple[int, datetime, str]] = {}
        for c in claimed:
            if c.available_at is None:
                continue
            key = (c.priority, c.available_at, c.job_id)
            held = last.get(c.queue)
            if held is None or _later(key, held):
                last[c.queue] = key
        with self._lock:
            self.after.update(last)
            if from_start:
                if self.slow_s is None or elapsed < self.slow_s:
                    self.full_due_at = 0.0
                else:
                    t = time.monotonic() if now is None else now
                    self.full_due_at = t + max(MIN_GAP_S, GAP_RATIO * elapsed)

    def scouted_queues(self) -> list[str]:
        """The queues whose claims start after a point, for the scout (none while claims
        read from the start)."""
        with self._lock:
            return sorted(self.after) if self.onward else []

    def scouted(
        self,
        firsts: Iterable[tuple[str, int, datetime, str]],
        elapsed: float,
        now: float | None = None,
    ) -> int:
        """What the scout found, from the start, in ``elapsed`` seconds: the first claimable
        job per queue (queue, priority, available_at, id). A point after such a job of its
        own priority moves back to just before it (a more urgent job is read from the start
        anyway, a less urgent one must wait its turn). A fast read turns claiming onward off;
        a slow one puts the round's next claim from the start off by twice the scout's own
        cadence (it takes over if the scout stops). Answers the points moved back."""
        moved = 0
        t = time.monotonic() if now is None else now
        with self._lock:
            if not self.onward or self.slow_s is None:  # onward only ever with a threshold
                return 0
            if elapsed >= self.slow_s:
                self.full_due_at = max(
                    self.full_due_at, t + 2 * max(MIN_GAP_S, GAP_RATIO * elapsed)
                )
            else:
                self.full_due_at = 0.0
            for queue, priority, at, job_id in firsts:
                point = self.after.get(queue)
                if point is None or point[0] != priority or (at, job_id) >= (point[1], point[2]):
                    continue
                # Just before it: the onward read takes ``(available_at, id) > (at, "")``.
                self.after[queue] = (priority, at, "")
                moved += 1
        return moved


class Points:
    """Per queue (in the claim's order of queues): the priority, ``available_at`` and id of
    the last job claimed, or None."""

    __slots__ = ("ids", "prios", "times")

    def __init__(
        self, prios: list[int | None], times: list[datetime | None], ids: list[str | None]
    ) -> None:
        self.prios, self.times, self.ids = prios, times, ids


def _later(key: tuple[int, datetime, str], than: tuple[int, datetime, str]) -> bool:
    """Whether ``key`` comes after ``than`` in claim order (priority descending)."""
    if key[0] != than[0]:
        return key[0] < than[0]
    return (key[1], key[2]) > (than[1], than[2])
