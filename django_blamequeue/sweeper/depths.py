"""The console's charts, fed by the sweeper: each queue's depth (its pending jobs, delayed
included) once a minute, and the chart buckets past their window pruned (docs/admin.md#charts).

The depth is read with ``stats()`` (one grouped count of the jobs: on PostgreSQL with a
million jobs, a few hundred milliseconds a minute); several sweepers each write it, and the
last one read stands (a depth replaces, it does not add).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django_blamequeue.backends.base import Backend
from django_blamequeue.core.timeseries import Sample


@dataclass(frozen=True, slots=True)
class DepthReport:
    queues: int = 0
    pruned: int = 0


class Depths:
    paced = True  # reads the job table's indexes: spaced out when a pass is slow

    def __init__(self, backend: Backend, *, period: float = 60.0) -> None:
        self.backend = backend
        self.period = period
        self.name = f"depths[{backend.alias}]"

    def run_once(self, now: datetime | None = None) -> DepthReport:
        b = self.backend
        stats = b.resilience.call(b.stats, idempotent=True)
        samples = [Sample(queue=st.queue, depth=st.counts.get("pending", 0)) for st in stats]
        b.resilience.call(lambda: b.record_samples(samples, now))
        pruned = b.resilience.call(lambda: b.prune_buckets(now))
        return DepthReport(queues=len(samples), pruned=pruned)
