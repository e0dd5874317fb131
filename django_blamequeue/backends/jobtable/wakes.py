"""A durable workflow's two needs of the job table: waking a parked job, and fencing a step.

A parked workflow is a pending job due at its timer or its wait's deadline; an event or a
finished child makes it due now (``wake``). A step's record commits in a transaction on this
very database, so its fence is a locking read of the job's row under the run's token
(rule: fence): the rescuer's update waits for the commit, and a run that lost its lease
commits nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from django_blamequeue.backends.jobtable.table import JobTable, Released
from django_blamequeue.core.states import State


class Wakes:
    def __init__(self, table: JobTable, released: Released) -> None:
        self.table = table
        self.released = released  # the local backend wakes workers; SQS sends the messages

    def wake(self, job_ids: Sequence[str], now: datetime | None = None) -> int:
        if not job_ids:
            return 0
        with transaction.atomic(using=self.table.db):
            t = self.table.clock(now)
            parked = self.table.jobs().filter(
                id__in=list(job_ids), state=State.PENDING, available_at__gt=t
            )
            rows = list(parked.select_for_update().values_list("id", "queue"))
            if rows:
                self.table.jobs().filter(id__in=[r[0] for r in rows]).update(available_at=t)
                self.released([(job_id, queue) for job_id, queue in rows], t)
        return len(rows)

    def fence_step(self, job_id: str, token: str) -> bool:
        if not self.table.connection.in_atomic_block:
            raise RuntimeError("fence_step runs inside the step's transaction")
        held = self.table.jobs().filter(id=job_id, lease_token=token, state=State.INFLIGHT)
        if self.table.is_postgres:
            held = held.select_for_update()
        return bool(held.exists())
