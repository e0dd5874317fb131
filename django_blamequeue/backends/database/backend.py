"""The local backend: jobs are rows of the project's own database (SQLite or PostgreSQL).

The job table is the queue itself: transactional, LISTEN-able on PostgreSQL, cheap to poll on
SQLite. Each verb is one short transaction on the configured database; enqueue joins the
caller's (``atomic(savepoint=False)``), so a job enqueued inside ``transaction.atomic()`` is a
row of that transaction and rolls back with it.

What the local backend shares with the SQS ledger it holds as the parts of
``backends/jobtable`` and hands those verbs to them; what is written here is its own: the
one-statement enqueue, the claim, the combined ack-and-claim, the rescuer's pass and LISTEN.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import InterfaceError, OperationalError, transaction

from django_blamequeue import audit
from django_blamequeue.backends import wakeup
from django_blamequeue.backends.base import Backend
from django_blamequeue.backends.database.listen import PgListener
from django_blamequeue.backends.jobtable import effects, rotation, sql
from django_blamequeue.backends.jobtable.acks import Acks
from django_blamequeue.backends.jobtable.attempts import Attempts
from django_blamequeue.backends.jobtable.bulk import BulkEdits
from django_blamequeue.backends.jobtable.checkpoints import Checkpoints
from django_blamequeue.backends.jobtable.control_rows import ControlRows
from django_blamequeue.backends.jobtable.expiry import Expiry
from django_blamequeue.backends.jobtable.flows import Flows
from django_blamequeue.backends.jobtable.inserts import Inserts
from django_blamequeue.backends.jobtable.leases import RESCUE_COLUMNS, Leases
from django_blamequeue.backends.jobtable.limited import LimitedClaims
from django_blamequeue.backends.jobtable.listing import Listing
from django_blamequeue.backends.jobtable.manifests import Manifests
from django_blamequeue.backends.jobtable.rows import claimed_from_pg_row, claimed_from_row
from django_blamequeue.backends.jobtable.table import CHANNEL, CONTROL_CHANNEL, JobTable
from django_blamequeue.backends.jobtable.timeseries import TimeSeries
from django_blamequeue.backends.jobtable.wakes import Wakes
from django_blamequeue.conf import BackendConfig
from django_blamequeue.core.controls import ControlState, HandlerWait
from django_blamequeue.core.limits import QueueLimits
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import (
    Ack,
    AckResult,
    AttemptInfo,
    Backlog,
    CancelResult,
    Claimed,
    EffectsFence,
    EnqueuedJob,
    FlowState,
    JobInfo,
    KeyRotation,
    LeaseSignals,
    NewJob,
    PruneReport,
    QueueStats,
    Report,
    RescueReport,
)
from django_blamequeue.core.states import State
from django_blamequeue.core.timeseries import Bucket, Sample
from django_blamequeue.models import Job


class DatabaseBackend(Backend):
    """The local backend: SQLite or PostgreSQL, through Django's own connections."""

    protocol = "local"
    transactional_enqueue = True
    supports_flows = True
    supports_apply_and_claim = True
    supports_key_rotation = True
    effects_with_ack = True
    unavailable_errors: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        table = self.jobtable = JobTable(Job, config)
        self.db = self.database = table.db
        self.supports_listen = table.is_postgres and bool(config.options.get("LISTEN", True))
        self.cheap_polling = not table.is_postgres
        self.flows = Flows(table, self._released)
        self.manifests = Manifests(table, self.flows, self)
        self.inserts = Inserts(table, self.flows)
        self.history = Attempts(table)
        self.acks = Acks(table, self.flows, self.manifests, self.history)
        self.leases = Leases(table, self.flows, self.history)
        self.bulk = BulkEdits(table, self.history, self._released)
        self.timeseries = TimeSeries(table)
        self.checkpoints = Checkpoints(table)
        self.listing = Listing(table, self.manifests, self._released)
        self.control_rows = ControlRows(table, listen=self.supports_listen)
        self.limited = LimitedClaims(table)
        self.wakes = Wakes(table, self._released)
        self.expiry = Expiry(table, self.flows)

    def _released(self, rows: Sequence[tuple[str, str]], now: datetime) -> None:
        """Jobs a transaction made pending from a state that holds no message: the table is
        the queue, so waking workers is all they need."""
        self.jobtable.notify([queue for _, queue in rows])

    @property
    def effects_database(self) -> str:
        return self.db

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
        if self.inserts.one_statement(jobs, events):
            self.inserts.insert_rows(jobs, now, wake)  # autocommit: the INSERT is the transaction
            wakeup.notify(wake)
            return [
                EnqueuedJob(job_id=j.job_id, queue_name=j.queue, backend=self.alias) for j in jobs
            ]
        if self.inserts.one_upsert(jobs, events):
            answer, _ = self.inserts.insert(jobs, now, wake)  # autocommit, as above
            wakeup.notify(wake)
            return [answer[jobs[0].job_id]]
        # A unique job that may be refused (DUPLICATE) runs in a savepoint, so a caller's
        # transaction that catches the refusal goes on.
        savepoint = any(j.unique_mode == "reject" for j in jobs)
        with transaction.atomic(using=self.db, savepoint=savepoint):
            answer, _ = self.inserts.insert(jobs, now, wake)
            transaction.on_commit(lambda: wakeup.notify(wake), using=self.db)
            self.inserts.record_enqueue(jobs, answer, events)
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
            results = self.acks.apply(acks, now) if acks else []
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
        their limits (``jobtable/limited.py``), then the others with what is left of
        ``limit``."""
        table = self.jobtable
        limited = [q for q in queues if limits and q in limits]
        qs = [q for q in queues if not (limits and q in limits)]
        claimed = self.limited.claim(limited, limit, lease_s, now, limits or {}) if limited else []
        limit -= len(claimed)
        if qs and limit > 0 and table.is_postgres:
            params = [qs, self.alias, now, now, now, float(lease_s), now, now]
            rows = table.fetch(sql.claim_postgresql(limit), params, generic=True)
            claimed += [claimed_from_pg_row(r) for r in rows]
        elif qs and limit > 0:
            t = table.clock(now)
            expires = t + timedelta(seconds=lease_s)
            a = table.adapt
            params = [a(expires), a(t), a(t), *qs, self.alias, a(t), a(t), limit]
            with table.connection.cursor() as cur:
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
            return self.acks.apply(acks, now)

    def fence_effects(self, ack: Ack, *, attempt: int, now: datetime | None = None) -> EffectsFence:
        effects.require_transaction(self.jobtable)
        [result] = self.acks.apply([ack], now)
        return effects.answer(result)

    def wake(self, job_ids: Sequence[str], now: datetime | None = None) -> int:
        return self.wakes.wake(job_ids, now)

    def fence_step(self, job_id: str, token: str) -> bool | None:
        return self.wakes.fence_step(job_id, token)

    def extend_lease(
        self, job_id: str, token: str, seconds: float, now: datetime | None = None
    ) -> bool:
        return self.leases.extend(job_id, token, seconds, now)

    def renew_leases(
        self, leases: Sequence[tuple[str, str]], seconds: float, now: datetime | None = None
    ) -> frozenset[str]:
        return self.leases.renew(leases, seconds, now)

    def lease_signals(self, leases: Sequence[tuple[str, str]]) -> LeaseSignals:
        return self.leases.signals(leases)

    def set_progress(self, job_id: str, token: str, progress: int) -> bool:
        return self.leases.set_progress(job_id, token, progress)

    def run_alone(self, job_id: str, token: str) -> bool:
        return self.leases.run_alone(job_id, token)

    def save_checkpoints(
        self, items: Sequence[tuple[str, str, str]], now: datetime | None = None
    ) -> frozenset[str]:
        return self.checkpoints.save(items, now)

    def rescue_expired(
        self, now: datetime | None = None, limit: int = 1000, *, max_stalled: int = 1
    ) -> RescueReport:
        with transaction.atomic(using=self.db):
            t = self.jobtable.clock(now)
            qs = self.jobtable.jobs().filter(state=State.INFLIGHT, lease_expires_at__lt=t)
            qs = qs.order_by("lease_expires_at")
            if self.jobtable.is_postgres:
                qs = qs.select_for_update(skip_locked=True)
            rows = list(qs.values_list(*RESCUE_COLUMNS)[:limit])
            groups = self.leases.rescue_rows(rows, t, max_stalled)
        return RescueReport(
            repended=len(groups[State.PENDING]),
            failed=len(groups[State.FAILED]),
            cancelled=len(groups[State.CANCELLED]),
        )

    def expire(self, now: datetime | None = None, limit: int = 500) -> list[str]:
        return self.expiry.expire(now, limit)

    # -- operations ------------------------------------------------------------------------
    def cancel(self, job_id: str, now: datetime | None = None) -> CancelResult:
        return self.flows.cancel(job_id, now)

    def cancel_flow(self, flow_id: str, now: datetime | None = None) -> int:
        return self.flows.cancel_flow(flow_id, now)

    def purge(self, queue: str, created_before: datetime | None = None) -> int:
        return self.listing.purge(queue, created_before)

    def get(self, job_id: str) -> JobInfo | None:
        return self.listing.get(job_id)

    def size(self, queue: str) -> int:
        return self.listing.size(queue)

    def dlq_list(self, queue: str | None, limit: int = 100, offset: int = 0) -> list[JobInfo]:
        return self.listing.dlq_list(queue, limit, offset)

    def dlq_size(self, queue: str | None) -> int:
        return self.listing.dlq_size(queue)

    def dlq_retry(self, job_id: str, now: datetime | None = None) -> bool:
        return self.listing.dlq_retry(job_id, now)

    def dlq_retry_all(self, queue: str, now: datetime | None = None) -> int:
        return self.listing.dlq_retry_all(queue, now)

    def jobs_about(self, about: str, limit: int) -> list[JobInfo]:
        return self.listing.jobs_about(about, limit)

    def flow_jobs(self, flow_id: str) -> list[JobInfo]:
        return self.flows.flow_jobs(flow_id)

    def stats(self) -> list[QueueStats]:
        return self.listing.stats()

    def prune(
        self,
        *,
        done_before: datetime | None,
        cancelled_before: datetime | None,
        failed_before: datetime | None,
        limit: int = 5000,
    ) -> PruneReport:
        return self.listing.prune(
            done_before=done_before,
            cancelled_before=cancelled_before,
            failed_before=failed_before,
            limit=limit,
        )

    def backlog(self, queues: Sequence[str]) -> Backlog:
        return self.listing.backlog(queues)

    # -- operators' bulk edits, history, charts ---------------------------------------------
    def rotate_keys(
        self,
        payload: Callable[[Encoded], Encoded],
        text: Callable[[str | None], str | None],
        *,
        after: str = "",
        limit: int = 500,
    ) -> KeyRotation:
        return rotation.rotate(self.jobtable, payload, text, after=after, limit=limit)

    def delete_jobs(self, job_ids: Sequence[str]) -> int:
        return self.bulk.delete(job_ids)

    def move_jobs(self, job_ids: Sequence[str], queue: str, now: datetime | None = None) -> int:
        return self.bulk.move(job_ids, queue, now)

    def set_priority(
        self, job_ids: Sequence[str], priority: int, now: datetime | None = None
    ) -> int:
        return self.bulk.set_priority(job_ids, priority, now)

    def dlq_retry_many(self, job_ids: Sequence[str], now: datetime | None = None) -> int:
        return self.listing.dlq_retry_many(job_ids, now)

    def attempts(self, job_id: str) -> list[AttemptInfo]:
        return self.history.of(job_id)

    def record_samples(self, samples: Sequence[Sample], now: datetime | None = None) -> None:
        self.timeseries.record(samples, now)

    def buckets(
        self,
        step: int,
        since: datetime,
        until: datetime,
        *,
        queue: str | None = None,
        name: str | None = None,
    ) -> list[Bucket]:
        return self.timeseries.read(step, since, until, queue, name)

    def prune_buckets(self, now: datetime | None = None) -> int:
        return self.timeseries.prune(now)

    # -- the control plane -----------------------------------------------------------------
    def controls(self, queues: Sequence[str] | None = None) -> dict[str, ControlState]:
        return self.control_rows.controls(queues)

    def pause(
        self, queue: str, *, reason: str = "", by: str | None = None, now: datetime | None = None
    ) -> ControlState:
        return self.control_rows.pause(queue, reason=reason, by=by, now=now)

    def resume(
        self, queue: str, *, by: str | None = None, now: datetime | None = None
    ) -> ControlState:
        return self.control_rows.resume(queue, by=by, now=now)

    def set_limits(
        self,
        queue: str,
        limits: QueueLimits | None,
        *,
        by: str | None = None,
        now: datetime | None = None,
    ) -> ControlState:
        return self.control_rows.set_limits(queue, limits, by=by, now=now)

    def handler_waits(self, queues: Sequence[str] | None = None) -> list[HandlerWait]:
        return self.control_rows.handler_waits(queues)

    def waiting_names(self) -> dict[tuple[str, str], int]:
        return self.control_rows.waiting_names()

    # -- parent/child flows ----------------------------------------------------------------
    def flow_state(self, parent_id: str) -> FlowState:
        return self.manifests.flow_state(parent_id)

    def flow_states(self, parent_ids: Sequence[str]) -> dict[str, FlowState]:
        return self.manifests.flow_states(parent_ids)

    def deliver_reports(self, reports: Sequence[Report], now: datetime | None = None) -> int:
        return self.flows.deliver_reports(reports, now)

    def report_terminal(self, ids: Sequence[str]) -> int:
        return self.flows.report_terminal(ids)

    def settle_reported(self, parent_ids: Sequence[str], now: datetime | None = None) -> list[str]:
        return self.flows.settle_reported(parent_ids, now)

    def unsent_for(self, job_ids: Sequence[str], kind: str) -> set[str]:
        return self.flows.unsent_for(job_ids, kind)

    def child_states(self, ids: Sequence[str]) -> dict[str, str]:
        return self.manifests.child_states(ids)

    def waiting_parents(self, after: str, limit: int) -> list[str]:
        return self.manifests.waiting_parents(after, limit)

    def pending_children(self, parent_id: str) -> list[tuple[str, str]]:
        return self.manifests.pending_children(parent_id)

    def reland(self, parent_id: str, child_ids: Sequence[str], now: datetime | None = None) -> int:
        return self.manifests.reland(parent_id, child_ids, now)

    def cascade_due(self, limit: int) -> list[str]:
        return self.flows.cascade_due(limit)

    def cascade(
        self, parent_id: str, now: datetime | None = None
    ) -> tuple[int, list[tuple[str, str]]]:
        return self.flows.cascade(parent_id, now)

    # -- clock, wake-ups, connections ------------------------------------------------------
    def now(self) -> datetime:
        return self.jobtable.now()

    def listener(self, queues: Sequence[str]) -> Any:
        if not self.supports_listen:
            return None
        return PgListener(self.db, CHANNEL, queues, control=CONTROL_CHANNEL)

    def on_unavailable(self) -> None:
        self.jobtable.on_unavailable()


__all__ = ["DatabaseBackend"]
