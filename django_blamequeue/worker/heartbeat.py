"""What a worker's heartbeat learns about the leases it holds, and which runs must end.

The consumer's main thread asks each round: runs past their deadline time out; leases due for
renewal are renewed in one statement (half a lease after the last renewal); about once a second
the held leases are asked about (lost to another worker? a cancel requested?). The answers are
``Stop``s — the consumer does the interrupting and the acking, so every decision about a run
stays on its one thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from django_blamequeue.backends.base import Backend
from django_blamequeue.core import lifecycle
from django_blamequeue.exceptions import JobCancelled, JobInterrupted, JobTimeout, LeaseLost
from django_blamequeue.worker.execution import Run

SIGNAL_POLL = 1.0  # seconds between checks for cancel requests on held leases


@dataclass(frozen=True, slots=True)
class Stop:
    """A run to interrupt with ``exc_type``, then to ack as ``outcome`` (None: the lease is
    lost, someone else owns the job, nothing to ack)."""

    run: Run
    exc_type: type[JobInterrupted]
    outcome: lifecycle.Outcome | None


class Heartbeat:
    def __init__(self, backend: Backend, lease: float, *, signal_poll: float = SIGNAL_POLL):
        self.backend = backend
        self.lease = lease
        self.signal_poll = signal_poll
        self._next_signals = 0.0

    def deadlines(self, running: Mapping[str, Run], now: float) -> list[Stop]:
        """The runs past their timeout (monotonic ``now``)."""
        return [
            Stop(run, JobTimeout, lifecycle.TimedOut(run.deadline - run.started))
            for run in list(running.values())
            if run.deadline is not None and now >= run.deadline
        ]

    def renew(self, running: Mapping[str, Run], now: float) -> list[Stop]:
        """Renew the leases due (one statement); answers the runs whose lease was lost.
        Raises ``QueueError`` when the backend cannot be asked: nothing is lost, the
        consumer backs off and asks again."""
        due = [r for r in running.values() if now >= r.renew_at]
        if not due:
            return []
        leases = [(r.claimed.job_id, r.claimed.token) for r in due]
        lost = self.backend.resilience.call(
            lambda: self.backend.renew_leases(leases, self.lease), idempotent=True
        )
        for r in due:
            r.lease_until = now + self.lease
            r.renew_at = now + self.lease / 2
        return [Stop(running[j], LeaseLost, None) for j in lost if j in running]

    def signals(self, running: Mapping[str, Run], now: float) -> list[Stop]:
        """About once a second: which held leases were lost, which runs were asked to
        cancel. Raises ``QueueError`` as ``renew`` does."""
        if not running or now < self._next_signals:
            return []
        self._next_signals = now + self.signal_poll
        held = [(r.claimed.job_id, r.claimed.token) for r in running.values()]
        signals = self.backend.resilience.call(
            lambda: self.backend.lease_signals(held), idempotent=True
        )
        stops = [
            Stop(running[j], JobCancelled, lifecycle.Cancelled())
            for j in signals.cancel_requested
            if j in running
        ]
        return stops + [Stop(running[j], LeaseLost, None) for j in signals.lost if j in running]

    def next_due(self, running: Mapping[str, Run], now: float) -> float:
        """Seconds until the next deadline, renewal or signal poll (for the main loop's wait)."""
        wait = float("inf")
        for run in running.values():
            if run.deadline is not None:
                wait = min(wait, max(0.0, run.deadline - now))
            wait = min(wait, max(0.0, run.renew_at - now))
        if running:
            wait = min(wait, max(0.0, self._next_signals - now))
        return wait
