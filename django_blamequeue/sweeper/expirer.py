"""Expiry: waiting jobs past their ``expires_at`` end cancelled, reason ``expired``.

No claim ever leases such a job (rule: expiry); the redis backend's claim cancels the ready
ones it meets. This pass cancels the rest — delayed ones, blocked ones, those behind a
backlog — so an expired job shows as cancelled within a sweep, audited and counted.
"""

from __future__ import annotations

from datetime import datetime

from django_blamequeue.backends.base import Backend


class Expirer:
    paced = True  # reads the job table's indexes: spaced out when a pass is slow

    def __init__(self, backend: Backend, *, period: float = 5.0, batch: int = 500) -> None:
        self.backend = backend
        self.period = period
        self.batch = batch
        self.name = f"expirer[{backend.alias}]"

    def run_once(self, now: datetime | None = None) -> int:
        """Expire what is due, a batch per call, until a batch comes back short."""
        total = 0
        while True:
            ids = self.backend.resilience.call(lambda: self.backend.expire(now, self.batch))
            total += len(ids)
            if len(ids) < self.batch:
                return total
