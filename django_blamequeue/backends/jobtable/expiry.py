"""Expiry in the job table: waiting jobs past their ``expires_at`` end cancelled, reason
``expired`` (rule: expiry).

A claim never leases an expired job (``sql.not_expired`` in every claim statement); this part
cancels them, for the sweeper (``expire``) and for the SQS receive rules (``expire_ids``,
when a message of one arrives). A cancelled job reports to its flow parent and cancels its
DAG dependants and children as a cancel does, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from django_blamequeue import audit
from django_blamequeue.backends.jobtable.flows import Flows
from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.core.states import Reason, State

_WAITING = [State.PENDING.value, State.BLOCKED.value]


class Expiry:
    """Cancels a job table's expired waiting jobs."""

    def __init__(self, table: JobTable, flows: Flows) -> None:
        self.table = table
        self.flows = flows  # reports to flow parents, cascades to dependants and children

    def expire(self, now: datetime | None = None, limit: int = 500) -> list[str]:
        """Cancel up to ``limit`` waiting jobs whose ``expires_at`` passed (``bq_job_expires``);
        answer their ids. Rows another sweeper holds are left to it (``SKIP LOCKED``)."""
        with transaction.atomic(using=self.table.db):
            t = self.table.clock(now)
            qs = self.table.jobs().filter(state__in=_WAITING, expires_at__lte=t)
            if self.table.is_postgres:
                qs = qs.select_for_update(skip_locked=True)
            ids = list(qs.order_by("expires_at").values_list("id", flat=True)[:limit])
            return self.expire_ids(ids, t) if ids else []

    def expire_ids(self, ids: Sequence[str], now: datetime) -> list[str]:
        """Inside the caller's transaction: cancel those of ``ids`` that are waiting and
        expired at ``now`` (rule: expiry); answer their ids."""
        rows = list(
            self.table.jobs()
            .filter(id__in=list(ids), state__in=_WAITING, expires_at__lte=now)
            .values_list("id", "queue", "name", "expires_at")
        )
        if not rows:
            return []
        expired = [r[0] for r in rows]
        self.table.jobs().filter(id__in=expired, state__in=_WAITING).update(
            state=State.CANCELLED,
            reason=Reason.EXPIRED.value,
            finished_at=now,
            updated_at=now,
        )
        audit.record(
            [
                audit.Event(
                    action=audit.EXPIRE,
                    job_id=job_id,
                    queue=queue,
                    backend=self.table.alias,
                    data={"name": name, "expires_at": at.isoformat() if at else None},
                )
                for job_id, queue, name, at in rows
            ],
            using=self.table.db,
        )
        self.flows.report_terminal(expired)
        self.flows.cascade_children(expired, now)
        return expired
