"""Operators' bulk edits of a job table (the local backend, the SQS ledger): delete, move to
another queue, change priority — each one transaction per call, fenced by state (a job that
started running meanwhile is left alone) and audited per job."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from django_blamequeue import audit
from django_blamequeue.backends.jobtable.attempts import Attempts
from django_blamequeue.backends.jobtable.table import JobTable, Released
from django_blamequeue.core.states import State
from django_blamequeue.models import FlowDependency

#: Jobs that may be deleted: anything not running (a worker, or a flow's children, hold it).
DELETABLE = [State.PENDING, State.BLOCKED, State.FAILED, State.DONE, State.CANCELLED]
#: Jobs that may change queue or priority: those waiting to run, and the DLQ.
EDITABLE = [State.PENDING, State.BLOCKED, State.FAILED]


class BulkEdits:
    """Delete, move and reprioritize jobs of one table."""

    def __init__(self, table: JobTable, attempts: Attempts, released: Released) -> None:
        self.table = table
        self.attempts = attempts  # a deleted job's history goes with it
        self.released = released  # pending jobs moved to a queue: wake (or send) them there

    def _locked(self, job_ids: Sequence[str], states: list[State], *fields: str) -> list[Any]:
        """The rows among ``job_ids`` in ``states``, locked until the transaction ends."""
        qs = self.table.jobs().filter(id__in=list(job_ids), state__in=states)
        if self.table.is_postgres:
            qs = qs.select_for_update()
        return list(qs.order_by("id").values_list("id", "queue", "state", *fields))

    def delete(self, job_ids: Sequence[str]) -> int:
        with transaction.atomic(using=self.table.db):
            rows = self._locked(job_ids, DELETABLE)
            ids = [r[0] for r in rows]
            if not ids:
                return 0
            FlowDependency.objects.using(self.table.db).filter(job_id__in=ids).delete()
            n: int = self.table.jobs().filter(id__in=ids, state__in=DELETABLE).delete()[0]
            self.attempts.forget(ids)
            self._audit(audit.DELETE, [(r[0], r[1], {"state": r[2]}) for r in rows])
        return n

    def move(self, job_ids: Sequence[str], queue: str, now: datetime | None) -> int:
        with transaction.atomic(using=self.table.db):
            t = self.table.clock(now)
            rows = [r for r in self._locked(job_ids, EDITABLE, "dedupe_key") if r[1] != queue]
            keyed = [r for r in rows if r[3] and r[2] != State.FAILED]  # the dedupe index's
            plain = [r[0] for r in rows if r not in keyed]
            moved = set(plain) if self._update(plain, queue=queue, updated_at=t) else set()
            for r in keyed:  # one at a time: the target queue may hold the key already
                try:
                    with transaction.atomic(using=self.table.db):
                        if self._update([r[0]], queue=queue, updated_at=t):
                            moved.add(r[0])
                except IntegrityError:
                    continue
            done = [r for r in rows if r[0] in moved]
            self.released([(r[0], queue) for r in done if r[2] == State.PENDING], t)
            self._audit(audit.MOVE, [(r[0], queue, {"from": r[1], "to": queue}) for r in done])
        return len(done)

    def set_priority(self, job_ids: Sequence[str], priority: int, now: datetime | None) -> int:
        with transaction.atomic(using=self.table.db):
            t = self.table.clock(now)
            rows = [r for r in self._locked(job_ids, EDITABLE, "priority") if r[3] != priority]
            self._update([r[0] for r in rows], priority=priority, updated_at=t)
            self._audit(
                audit.PRIORITY, [(r[0], r[1], {"from": r[3], "to": priority}) for r in rows]
            )
        return len(rows)

    def _update(self, ids: list[str], **fields: Any) -> int:
        if not ids:
            return 0
        n: int = self.table.jobs().filter(id__in=ids, state__in=EDITABLE).update(**fields)
        return n

    def _audit(self, action: str, rows: Sequence[tuple[str, str, dict[str, Any]]]) -> None:
        audit.record(
            [
                audit.Event(
                    action=action, job_id=job_id, queue=queue, backend=self.table.alias, data=data
                )
                for job_id, queue, data in rows
            ],
            using=self.table.db,
        )
