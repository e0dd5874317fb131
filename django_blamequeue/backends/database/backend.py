"""The local backend's verbs. Each is one short transaction on the configured database.

Enqueue joins the caller's transaction (``atomic(savepoint=False)``), so a job enqueued inside
``transaction.atomic()`` is a row of that transaction and rolls back with it. The writes and
read-outs it shares with the SQS ledger live in ``backends/jobtable``; what is here is only
the local backend's: the one-statement enqueue, the claim, the combined ack-and-claim, the
rescuer's pass and LISTEN.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from django_blamequeue import audit
from django_blamequeue.backends import wakeup
from django_blamequeue.backends.database.base import CHANNEL, CONTROL_CHANNEL, LocalBase
from django_blamequeue.backends.database.listen import PgListener
from django_blamequeue.backends.jobtable import sql
from django_blamequeue.backends.jobtable.acks import Acks
from django_blamequeue.backends.jobtable.checkpoints import Checkpoints
from django_blamequeue.backends.jobtable.control import ControlRows
from django_blamequeue.backends.jobtable.dag import DagRelease
from django_blamequeue.backends.jobtable.effects import InTransaction
from django_blamequeue.backends.jobtable.inserts import Inserts
from django_blamequeue.backends.jobtable.leases import RESCUE_COLUMNS, Leases
from django_blamequeue.backends.jobtable.limited import LimitedClaims
from django_blamequeue.backends.jobtable.listing import Listing
from django_blamequeue.backends.jobtable.manifests import Manifests
from django_blamequeue.backends.jobtable.reports import ChildReports
from django_blamequeue.backends.jobtable.rows import claimed_from_pg_row, claimed_from_row, to_dt
from django_blamequeue.core.limits import QueueLimits
from django_blamequeue.core.records import (
    Ack,
    AckResult,
    Claimed,
    EnqueuedJob,
    NewJob,
    RescueReport,
)
from django_blamequeue.core.states import TERMINAL, State


class DatabaseBackend(
    LocalBase,
    Inserts,
    Leases,
    Checkpoints,
    InTransaction,
    Acks,
    Listing,
    Manifests,
    ChildReports,
    DagRelease,
    ControlRows,
    LimitedClaims,
):
    """The local backend: SQLite or PostgreSQL, through Django's own connections."""

    supports_flows = True

    # -- enqueue ---------------------------------------------------------------------------
    def enqueue_many(
        self,
        jobs: Sequence[NewJob],
        now: datetime | None = None,
        *,
        events: Sequence[audit.Event] = (),
    ) -> list[EnqueuedJob]:
        if not jobs:
            return []
        # Jobs neither blocked nor delayed wake idle workers at commit. A job deduplicated
        # away, or one whose run_at is still ahead, makes that one empty claim.
        wake = sorted({j.queue for j in jobs if not (j.blocked or j.delay)})
        if self._one_statement(jobs, events):
            self._insert_rows(jobs, now, wake)  # autocommit: the INSERT is the transaction
            wakeup.notify(wake)
            return [
                EnqueuedJob(job_id=j.job_id, queue_name=j.queue, backend=self.alias) for j in jobs
            ]
        with transaction.atomic(using=self.db, savepoint=False):
            answer, _ = self._insert(jobs, now, wake)
            transaction.on_commit(lambda: wakeup.notify(wake), using=self.db)
            self._record_enqueue(jobs, answer, events)
        return [answer[j.job_id] for j in jobs]

    # -- leasing ---------------------------------------------------------------------------
    def claim(
        self,
        queues: Sequence[str],
        limit: int,
        lease_s: float,
        now: datetime | None = None,
        *,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> list[Claimed]:
        if limit <= 0 or not queues:
            return []
        with transaction.atomic(using=self.db):
            return self._claim(queues, limit, lease_s, now, limits)

    def apply_and_claim(
        self,
        acks: Sequence[Ack],
        queues: Sequence[str],
        limit: int,
        lease_s: float,
        now: datetime | None = None,
        *,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> tuple[list[AckResult], list[Claimed]]:
        """``apply_many`` then ``claim``, in one transaction: one commit (one WAL flush) per
        worker round instead of two. Both or neither: after an error the acks are re-sent
        (the fence makes that safe) and nothing was leased."""
        if not acks and (limit <= 0 or not queues):
            return [], []
        with transaction.atomic(using=self.db):
            results = self._apply(acks, now) if acks else []
            claimed = (
                self._claim(queues, limit, lease_s, now, limits) if limit > 0 and queues else []
            )
        return results, claimed

    def _claim(
        self,
        queues: Sequence[str],
        limit: int,
        lease_s: float,
        now: datetime | None,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> list[Claimed]:
        """The claim, inside the caller's transaction: the queues named in ``limits`` under
        their limits (``limited.py``), then the others with what is left of ``limit``."""
        limited = [q for q in queues if limits and q in limits]
        qs = [q for q in queues if not (limits and q in limits)]
        claimed = self._claim_limited(limited, limit, lease_s, now, limits or {}) if limited else []
        limit -= len(claimed)
        if qs and limit > 0 and self.is_postgres:
            params = [qs, self.alias, now, now, float(lease_s), now, now]
            rows = self._fetch(sql.claim_postgresql(limit), params, generic=True)
            claimed += [claimed_from_pg_row(r) for r in rows]
        elif qs and limit > 0:
            t = self._now(now)
            expires = t + timedelta(seconds=lease_s)
            a = self._adapt
            params = [a(expires), a(t), a(t), *qs, self.alias, a(t), limit]
            with self.connection.cursor() as cur:
                cur.execute(sql.claim_sqlite(len(qs)), params)
                claimed += [claimed_from_row(r) for r in cur.fetchall()]
        claimed.sort(key=lambda c: (-c.priority, c.available_at or c.lease_expires_at, c.job_id))
        if claimed:
            audit.record(audit.start_events(claimed, self.alias), using=self.db)
        return claimed

    def apply_many(self, acks: Sequence[Ack], now: datetime | None = None) -> list[AckResult]:
        if not acks:
            return []
        with transaction.atomic(using=self.db):
            return self._apply(acks, now)

    def rescue_expired(
        self, now: datetime | None = None, limit: int = 1000, *, max_stalled: int = 1
    ) -> RescueReport:
        with transaction.atomic(using=self.db):
            t = self._now(now)
            qs = self.jobs().filter(state=State.INFLIGHT, lease_expires_at__lt=t)
            qs = qs.order_by("lease_expires_at")
            if self.is_postgres:
                qs = qs.select_for_update(skip_locked=True)
            rows = list(qs.values_list(*RESCUE_COLUMNS)[:limit])
            groups = self._rescue_rows(rows, t, max_stalled)
        return RescueReport(
            repended=len(groups[State.PENDING]),
            failed=len(groups[State.FAILED]),
            cancelled=len(groups[State.CANCELLED]),
        )

    def listener(self, queues: Sequence[str]) -> Any:
        if not self.supports_listen:
            return None

        return PgListener(self.db, CHANNEL, queues, control=CONTROL_CHANNEL)


__all__ = ["TERMINAL", "DatabaseBackend", "to_dt"]
