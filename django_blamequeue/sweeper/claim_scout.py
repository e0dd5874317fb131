"""The claim scout: the read from the start of a queue, off the worker's round.

While a long transaction pins PostgreSQL's xmin horizon, a worker claims onward from the last
job it claimed (``backends/jobtable/claim_start.py``) and only now and then from the start,
for a job that sorts before that point. A claim from the start then reads every dead entry
of the claim index while its worker's round waits. The scout does that read instead, in the
sweeper's thread on its own connection, without a lock: it moves a worker's point back before
a job it skipped, and the worker's next claim (onward) takes it. Paced like the sweeper's
other index readers, and idle (no query) while the worker claims from the start.
"""

from __future__ import annotations

from django_blamequeue.backends.database import DatabaseBackend
from django_blamequeue.backends.jobtable.claim_start import MIN_GAP_S


class ClaimScout:
    paced = True  # reads the claim index from the start: spaced out when a pass is slow

    def __init__(self, backend: DatabaseBackend, *, period: float = MIN_GAP_S) -> None:
        self.backend = backend
        self.period = period
        self.name = f"claim_scout[{backend.alias}]"

    def run_once(self) -> int:
        """Points moved back (0 while the worker claims from the start)."""
        return self.backend.resilience.call(self.backend.scout_claim_points, idempotent=True)
