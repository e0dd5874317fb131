"""What every engine whose jobs are rows of a job table does the same way.

The local backend (the job table is the queue) and the SQS backend (the table is the ledger
SQS's messages answer to) hold the same parts of ``backends/jobtable`` over their table and
hand most verbs straight to them: listings, the DLQ, cancels, bulk edits, the control plane,
flows, progress and checkpoints. Those hand-offs live here, once; each engine's own module
keeps only what differs (the enqueue, the claim, the acks, leases and the rescuer's pass, key
rotation, LISTEN or the send step).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from django_blamequeue.backends.base import Backend
from django_blamequeue.backends.jobtable.acks import Acks
from django_blamequeue.backends.jobtable.attempts import Attempts
from django_blamequeue.backends.jobtable.bulk import BulkEdits
from django_blamequeue.backends.jobtable.checkpoints import Checkpoints
from django_blamequeue.backends.jobtable.control_rows import ControlRows
from django_blamequeue.backends.jobtable.expiry import Expiry
from django_blamequeue.backends.jobtable.flows import Flows
from django_blamequeue.backends.jobtable.inserts import Inserts
from django_blamequeue.backends.jobtable.leases import Leases
from django_blamequeue.backends.jobtable.limited import LimitedClaims
from django_blamequeue.backends.jobtable.listing import Listing
from django_blamequeue.backends.jobtable.manifests import Manifests
from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.backends.jobtable.timeseries import TimeSeries
from django_blamequeue.backends.jobtable.wakes import Wakes
from django_blamequeue.conf import BackendConfig
from django_blamequeue.core.controls import ControlState, HandlerWait
from django_blamequeue.core.limits import QueueLimits
from django_blamequeue.core.records import (
    AttemptInfo,
    Backlog,
    CancelResult,
    FlowState,
    JobInfo,
    LeaseSignals,
    PruneReport,
    QueueStats,
    Report,
)
from django_blamequeue.core.timeseries import Bucket, Sample

#: What a job table's engine does with jobs a transaction made pending from a state that
#: holds no message: (job id, queue) pairs and the transaction's clock.
Released = Callable[[Sequence[tuple[str, str]], datetime], None]


class JobTableBackend(Backend):
    """An engine over a job table (``table``): its parts, and the verbs they answer alone.
    ``released`` is the engine's way to make released jobs claimable again; ``listen``
    whether its control rows wake workers with NOTIFY."""

    def __init__(
        self, config: BackendConfig, table: JobTable, released: Released, *, listen: bool
    ) -> None:
        super().__init__(config)
        self.jobtable = table
        self.db = table.db
        self.flows = Flows(table, released)
        self.manifests = Manifests(table, self.flows, self)
        self.inserts = Inserts(table, self.flows)
        self.history = Attempts(table)
        self.acks = Acks(table, self.flows, self.manifests, self.history)
        self.leases = Leases(table, self.flows, self.history)
        self.bulk = BulkEdits(table, self.history, released)
        self.timeseries = TimeSeries(table)
        self.checkpoints = Checkpoints(table)
        self.listing = Listing(table, self.manifests, released)
        self.control_rows = ControlRows(table, listen=listen)
        self.limited = LimitedClaims(table)
        self.wakes = Wakes(table, released)
        self.expiry = Expiry(table, self.flows)

    @property
    def effects_database(self) -> str:
        return self.db

    # -- leasing ---------------------------------------------------------------------------
    def wake(self, job_ids: Sequence[str], now: datetime | None = None) -> int:
        return self.wakes.wake(job_ids, now)

    def fence_step(self, job_id: str, token: str) -> bool | None:
        return self.wakes.fence_step(job_id, token)

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

    # -- clock, connections ----------------------------------------------------------------
    def now(self) -> datetime:
        return self.jobtable.now()

    def on_unavailable(self) -> None:
        self.jobtable.on_unavailable()


__all__ = ["JobTableBackend", "Released"]
