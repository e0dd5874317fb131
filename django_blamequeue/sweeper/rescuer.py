"""Lease expiry and stalled recovery: expired leases go back to pending, or to the DLQ.

The risk, stated as Oban's lifeline does: a worker that is alive but stopped renewing for a
whole lease (a stopped VM, a GIL-bound handler starving the heartbeat) is treated as crashed.
Its late ack is then refused by the token fence, so the job is never completed twice.
"""

from __future__ import annotations

from datetime import datetime

from django_blamequeue.backends.base import Backend
from django_blamequeue.core.records import RescueReport


class Rescuer:
    name = "rescuer"
    paced = True  # reads the job table's indexes: spaced out when a pass is slow

    def __init__(
        self, backend: Backend, *, max_stalled: int = 1, period: float = 5.0, batch: int = 1000
    ) -> None:
        self.backend = backend
        self.max_stalled = max_stalled
        self.period = period
        self.batch = batch
        self.name = f"rescuer[{backend.alias}]"

    def run_once(self, now: datetime | None = None) -> RescueReport:
        total = RescueReport()
        while True:
            report = self.backend.resilience.call(
                lambda: self.backend.rescue_expired(now, self.batch, max_stalled=self.max_stalled)
            )
            total = RescueReport(
                repended=total.repended + report.repended,
                failed=total.failed + report.failed,
                cancelled=total.cancelled + report.cancelled,
            )
            if report.repended + report.failed + report.cancelled < self.batch:
                return total
