"""The console's charts, fed by the worker: per (queue, job name), how its acked attempts
ended and how long they waited and ran, sent to the engine's time buckets every ``FLUSH``
seconds and when the worker stops (docs/admin.md#charts).

Counting is in memory (a dict update per ack); the engine is written once per flush, off the
claim-and-ack round trip. A worker killed with ``kill -9`` takes at most its last ``FLUSH``
seconds of counts with it: the jobs are safe, only the chart under-counts them. A flush the
engine refuses is kept and sent with the next one.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django_blamequeue.backends.base import Backend
from django_blamequeue.core.records import AckResult, Transition
from django_blamequeue.core.states import State
from django_blamequeue.core.timeseries import SLOTS, Sample, merged, slot
from django_blamequeue.worker.execution import Run

logger = logging.getLogger("django_blamequeue.worker")

#: Seconds between flushes: the most a chart lags, and the most a crash loses.
FLUSH = 10.0
#: Keys kept while flushes fail: past it the oldest counts are dropped (the chart under-counts).
MAX_KEYS = 10_000
_COUNTED = {State.DONE: "done", State.FAILED: "failed", State.CANCELLED: "cancelled"}


class _Key:
    __slots__ = ("cancelled", "done", "failed", "retried", "run", "wait")

    def __init__(self) -> None:
        self.done = self.failed = self.retried = self.cancelled = 0
        self.wait = [0] * SLOTS
        self.run = [0] * SLOTS


class Tally:
    """One consumer's counts since its last flush."""

    def __init__(self, backend: Backend, lease: float) -> None:
        self.backend = backend
        self.lease = timedelta(seconds=lease)
        self._keys: dict[tuple[str, str], _Key] = {}
        self._unsent: list[Sample] = []
        self._next = time.monotonic() + FLUSH

    def add(self, run: Run, transition: Transition, res: AckResult) -> None:
        """An applied ack (``res.ok``) of an attempt that ran; one given back (a release,
        a snooze, a hand-back) ran nothing and counts nowhere."""
        if not res.ok or (res.state == State.PENDING and transition.give_back_attempt):
            return
        c = run.claimed
        key = self._keys.get((c.queue, c.name))
        if key is None:
            key = self._keys[(c.queue, c.name)] = _Key()
        field = _COUNTED.get(res.state) if res.state is not None else None
        if field is not None:
            setattr(key, field, getattr(key, field) + 1)
        elif res.state == State.PENDING:
            key.retried += 1
        if c.available_at is not None:  # the engine's clock: claimed at expiry - lease
            waited = (c.lease_expires_at - self.lease - c.available_at).total_seconds()
            key.wait[slot(waited)] += 1
        key.run[slot(time.monotonic() - run.started)] += 1

    def flush_due(self, now: float, *, force: bool = False) -> None:
        """Send what was counted when a flush is due (or ``force``d); never raises."""
        if not force and now < self._next:
            return
        self._next = now + FLUSH
        samples = merged([*self._unsent, *self._take()])
        self._unsent = []
        if not samples:
            return
        b = self.backend
        try:
            b.resilience.call(lambda: b.record_samples(samples))
        except Exception as exc:  # a chart is never worth a worker: keep them for later
            self._unsent = samples[-MAX_KEYS:]
            logger.warning(
                "chart counts not stored on %r (kept for the next flush): %s", b.alias, exc
            )

    def _take(self) -> list[Sample]:
        keys, self._keys = self._keys, {}
        return [
            Sample(
                queue=q,
                name=n,
                done=k.done,
                failed=k.failed,
                retried=k.retried,
                cancelled=k.cancelled,
                wait=tuple(k.wait),
                run=tuple(k.run),
            )
            for (q, n), k in keys.items()
        ]
