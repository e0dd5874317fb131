"""The one narrow interface every backend implements: job verbs, batched, fenced, time-aware.

Verbs take ``now``: ``None`` means the storage engine's own clock (the database's ``now()``,
Redis ``TIME``); tests pass a later ``now`` to move time instead of sleeping. Every ack is
fenced by the lease token: a stale token gives ``AckResult(ok=False)`` for that item and
changes nothing. The core reads the ``supports_*`` flags; it never branches on the class.
The verbs a backend may lack (flows, its own outbox) raise ``NotImplementedError`` here, and
the flag that says whether it has them is read first.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django_blamequeue.backends import marks
from django_blamequeue.backends.resilience import Resilience
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
    OutboxItem,
    PruneReport,
    QueueStats,
    Report,
    RescueReport,
)
from django_blamequeue.core.timeseries import Bucket, Sample
from django_blamequeue.exceptions import ErrorCode, QueueError

if TYPE_CHECKING:
    from django.core.checks import CheckMessage

    from django_blamequeue.audit import Event


class Backend(metaclass=ABCMeta):
    protocol: str = ""
    #: ``extend_lease`` works (SQS can only extend up to its 12-hour visibility cap, etc.).
    supports_extend_lease = True
    #: ``dlq_list`` can list failed jobs without consuming them.
    supports_dlq_listing = True
    #: Idle workers can wait on a push notification instead of polling.
    supports_listen = False
    #: How that push arrives, for the worker's banner.
    wake_up = "LISTEN/NOTIFY"
    #: An enqueue inside ``transaction.atomic()`` is part of that transaction by itself;
    #: otherwise the facade routes it through the outbox.
    transactional_enqueue = False
    #: Parent/child flows run here: the flow verbs below are implemented.
    supports_flows = False
    #: Polling is nearly free (an embedded database): idle workers poll at ``fast_poll``.
    cheap_polling = False
    #: ``apply_and_claim`` acks and leases in one transaction: one commit per worker round.
    supports_apply_and_claim = False
    #: Claims follow priority, then ``available_at``, then FIFO (SQS delivers in its own
    #: order: False there).
    supports_priority = True
    #: Verbs honour a ``now`` passed in for every rule, delivery included, so tests can move
    #: time instead of waiting. False where the engine's delivery clock cannot be overridden
    #: (SQS: visibility timeouts and message delays run on AWS's clock).
    supports_time_travel = True
    #: The engine keeps its own outbox (flow reports and cross-backend enqueues written
    #: atomically with its transitions, e.g. inside a Redis script): the relay takes its
    #: entries (``take_outbox``), delivers them and marks them done (``outbox_done``).
    has_outbox = False
    #: Some jobs' messages are sent after their state commits (SQS): the relay's passes call
    #: ``send_unsent`` for what a crash left unsent.
    sends_later = False
    #: A claim under per-key limits finds other keys' jobs behind a full key in claim order
    #: (False on SQS: it leases among the messages SQS delivers, in SQS's order).
    supports_key_order = True
    #: ``rotate_keys`` re-encrypts stored jobs in place (every engine here; a sent SQS
    #: message cannot change, and the count of those left old is reported).
    supports_key_rotation = False
    #: ``fence_effects`` applies the job's fenced ack inside the handler's transaction (its
    #: job rows live in that database: the local backend, the SQS ledger); False: it writes
    #: a completion mark there and the ack follows the commit (redis). docs/effects.md.
    effects_with_ack = False
    #: The engine drops the console's old chart buckets by itself (Redis: each bucket's key
    #: expires), so ``prune_buckets`` has nothing to do.
    expires_buckets = False
    #: Engine errors that mean "unavailable" (mapped to ``BACKEND_UNAVAILABLE``).
    unavailable_errors: tuple[type[BaseException], ...] = ()
    #: The Django database alias that holds this backend's jobs and audit rows (the local
    #: backend), or None for a remote engine (its audit rows go to ``default``). The admin
    #: lists jobs through it and joins its transactions to audit operators' actions.
    database: str | None = None

    def __init__(self, config: BackendConfig) -> None:
        self.alias = config.alias
        self.config = config
        #: The breaker and retry wrapper every call from above goes through (docs/concepts.md).
        self.resilience = Resilience(self)

    @property
    def effects_database(self) -> str:
        """The Django database an ``@job(atomic=True)`` handler's transaction runs on: the
        one holding the job rows (local, the SQS ledger), else the ``DATABASE`` option."""
        return str(self.config.options.get("DATABASE") or "default")

    # -- enqueue -------------------------------------------------------------------------
    @abstractmethod
    def enqueue_many(
        self,
        jobs: Sequence[NewJob],
        now: datetime | None = None,
        *,
        events: Sequence[Event] = (),
    ) -> list[EnqueuedJob]:
        """Store ``jobs`` (one round trip per batch), all or none. Dedupe keys answer the
        existing job. ``events`` are extra audit events recorded with the insert."""

    def check_jobs(self, jobs: Sequence[NewJob]) -> None:
        """Raise ``QueueError`` for jobs this engine could never carry (e.g. over an SQS
        queue's ``MaximumMessageSize``). The facade calls it before it writes an outbox row,
        so a job refused later by the relay is refused now instead, with nothing written.
        It must not fail because the engine is unreachable: the outbox is there for that."""

    # -- leasing -------------------------------------------------------------------------
    @abstractmethod
    def claim(
        self,
        queues: Sequence[str],
        limit: int,
        lease_s: float,
        now: datetime | None = None,
        *,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> list[Claimed]:
        """Lease up to ``limit`` available jobs in one statement; attempts count here.

        Never from a paused queue (rule: paused). The queues named in ``limits`` are claimed
        under their limits (rule: limits), counted by the engine across every worker: the
        live limits stored for the queue, else those given (the settings' defaults). A queue
        not named there is claimed unlimited, unless its stored control state says it is
        paused or limited: then it is skipped (the worker's view of it was stale)."""

    @abstractmethod
    def apply_many(self, acks: Sequence[Ack], now: datetime | None = None) -> list[AckResult]:
        """Apply finished attempts' transitions in one transaction, each fenced by its token."""

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
        """With ``supports_apply_and_claim``: ``apply_many(acks)`` and ``claim(queues, limit)``
        atomically (both or neither), so an error leaves the acks to be re-sent."""
        raise NotImplementedError

    def fence_effects(self, ack: Ack, *, attempt: int, now: datetime | None = None) -> EffectsFence:
        """Inside an atomic run's open transaction on ``effects_database``: fence its done
        ``ack`` so that the transaction's writes commit only with the job's completion
        (rule: effects-once). This default writes the job's completion mark (``marks.py``):
        "marked" (commit, then ack as usual) or "already" (roll back). Engines whose ack can
        join the transaction (``effects_with_ack``) answer "applied" or "stale" instead."""
        return marks.mark(self.effects_database, self.alias, ack, attempt, now)

    @abstractmethod
    def extend_lease(
        self, job_id: str, token: str, seconds: float, now: datetime | None = None
    ) -> bool:
        """Push the lease expiry to ``now + seconds``; False if the token is stale."""

    @abstractmethod
    def renew_leases(
        self, leases: Sequence[tuple[str, str]], seconds: float, now: datetime | None = None
    ) -> frozenset[str]:
        """Renew many (job_id, token) leases, never shortening one; answer the lost ids."""

    @abstractmethod
    def lease_signals(self, leases: Sequence[tuple[str, str]]) -> LeaseSignals:
        """Which held leases were lost, and which jobs someone asked to cancel."""

    @abstractmethod
    def set_progress(self, job_id: str, token: str, progress: int) -> bool:
        """Record progress 0–100 for a held lease; False if the token is stale."""

    def run_alone(self, job_id: str, token: str) -> bool:
        """Mark the held lease as running alone in its worker (a job on probation,
        ``core.lifecycle.on_probation``): a stall of that lease counts against the job past
        ``max_stalled``. Fenced by the token; False if it is stale."""
        raise NotImplementedError

    # -- durable workflows (docs/workflows.md) -------------------------------------------
    def wake(self, job_ids: Sequence[str], now: datetime | None = None) -> int:
        """Make the pending jobs among ``job_ids`` that are not yet due due at ``now`` (a
        parked workflow an event or a child woke); answers how many moved. Others (due,
        running, ended, unknown) are left as they are, so a wake is safe to repeat."""
        raise NotImplementedError

    def fence_step(self, job_id: str, token: str) -> bool | None:
        """Inside a workflow step's open transaction on ``effects_database``: True if the run
        still holds its lease (the job row stays locked until the commit), False if it lost
        it (the step must commit nothing). None where the job rows live elsewhere (redis):
        the step row's unique key alone decides, the first run to commit owning the step."""
        return None

    @abstractmethod
    def save_checkpoints(
        self, items: Sequence[tuple[str, str, str]], now: datetime | None = None
    ) -> frozenset[str]:
        """Store ``(job_id, token, checkpoint JSON text)`` for held leases in one round trip,
        each fenced by its token; answer the ids refused (stale token: nothing changed).
        The claim hands the stored text to the next attempt (``Claimed.checkpoint``)."""

    @abstractmethod
    def rescue_expired(
        self, now: datetime | None = None, limit: int = 1000, *, max_stalled: int = 1
    ) -> RescueReport:
        """Re-pend expired leases (stall + 1); past ``max_stalled`` fail them as stalled.

        The risk, stated: a job whose worker is alive but stopped renewing for a whole lease
        is treated as crashed. The fence keeps that worker from acking afterwards.
        """

    @abstractmethod
    def expire(self, now: datetime | None = None, limit: int = 500) -> list[str]:
        """Cancel up to ``limit`` waiting jobs whose ``expires_at`` passed, with reason
        ``expired`` (audited ``system.queue.expire``, reported and cascaded as a cancel);
        answer their ids. A claim never leases such a job (rule: expiry): this is the
        sweeper's pass over the ones no claim met."""

    # -- operations ----------------------------------------------------------------------
    @abstractmethod
    def cancel(self, job_id: str, now: datetime | None = None) -> CancelResult:
        """Waiting → cancelled at once; running → cancel requested; terminal → not found."""

    @abstractmethod
    def cancel_flow(self, flow_id: str, now: datetime | None = None) -> int:
        """Cancel every non-terminal job of a flow; answer how many."""

    @abstractmethod
    def purge(self, queue: str, created_before: datetime | None = None) -> int:
        """Delete the queue's waiting (pending, blocked) jobs; answer the count. With
        ``created_before``, only those created at or before it (by the engine's clock): a
        purge deletes at most what its confirmation counted."""

    @abstractmethod
    def get(self, job_id: str) -> JobInfo | None: ...

    @abstractmethod
    def size(self, queue: str) -> int:
        """Pending + inflight."""

    @abstractmethod
    def dlq_list(self, queue: str | None, limit: int = 100, offset: int = 0) -> list[JobInfo]:
        """The failed jobs of ``queue`` (None: of every queue), oldest first by id."""

    @abstractmethod
    def dlq_size(self, queue: str | None) -> int:
        """How many failed jobs ``queue`` (None: every queue) holds."""

    @abstractmethod
    def dlq_retry(self, job_id: str, now: datetime | None = None) -> bool:
        """A failed job back to pending with a fresh attempt budget; False if not failed."""

    @abstractmethod
    def dlq_retry_all(self, queue: str, now: datetime | None = None) -> int: ...

    def jobs_about(self, about: str, limit: int) -> list[JobInfo]:
        """The jobs about ``about`` (``"app_label.model_name:pk"``), newest first, at most
        ``limit``, from an index (``queue.jobs_about``)."""
        raise NotImplementedError

    @abstractmethod
    def flow_jobs(self, flow_id: str) -> list[JobInfo]:
        """Every job of a flow, with ``depends_on`` filled."""

    @abstractmethod
    def stats(self) -> list[QueueStats]: ...

    @abstractmethod
    def prune(
        self,
        *,
        done_before: datetime | None,
        cancelled_before: datetime | None,
        failed_before: datetime | None,
        limit: int = 5000,
    ) -> PruneReport:
        """Delete old terminal jobs (and their flow rows). ``None`` keeps that state."""

    # -- operators' bulk edits (the console; each job audited) ------------------------------
    def rotate_keys(
        self,
        payload: Callable[[Encoded], Encoded],
        text: Callable[[str | None], str | None],
        *,
        after: str = "",
        limit: int = 500,
    ) -> KeyRotation:
        """With ``supports_key_rotation``: a batch of about ``limit`` encrypted jobs not
        inflight, from where ``after`` says (an id, or the engine's cursor: ``last_id`` of
        the batch before), rewritten in place by ``payload`` (payload and result) and
        ``text`` (error, traceback, checkpoint, kept attempts' errors), each job only if
        unchanged since it was read (``blamequeue rotate-keys``, docs/encryption.md)."""
        message = (
            f"backend {self.alias!r} ({self.protocol}) cannot re-encrypt stored jobs in place; "
            "its jobs stay readable while ENCRYPTION_KEYS keeps the old key (docs/encryption.md)"
        )
        raise QueueError(ErrorCode.KEY_ROTATION_UNSUPPORTED, message)

    @abstractmethod
    def delete_jobs(self, job_ids: Sequence[str]) -> int:
        """Delete these jobs, unless running (inflight, waiting for children), with their
        flow rows and attempt history; answers how many. Unknown ids are skipped."""

    @abstractmethod
    def move_jobs(self, job_ids: Sequence[str], queue: str, now: datetime | None = None) -> int:
        """Move the waiting and failed ones (pending, blocked, failed) among these jobs to
        ``queue``, in their state; a waiting job whose dedupe key a live job holds there
        stays. Answers how many moved; workers of ``queue`` are woken for the pending."""

    @abstractmethod
    def set_priority(
        self, job_ids: Sequence[str], priority: int, now: datetime | None = None
    ) -> int:
        """Give the waiting and failed ones among these jobs ``priority`` (claims of the
        pending follow it at once); answers how many changed."""

    def dlq_retry_many(self, job_ids: Sequence[str], now: datetime | None = None) -> int:
        """``dlq_retry`` of each failed job among ``job_ids``; answers how many went back.
        An engine may do it in one round trip."""
        return sum(1 for job_id in job_ids if self.dlq_retry(job_id, now))

    # -- the console's history and charts ------------------------------------------------
    @abstractmethod
    def attempts(self, job_id: str) -> list[AttemptInfo]:
        """The job's attempt history, oldest first (which attempts: ``ATTEMPT_HISTORY``)."""

    @abstractmethod
    def record_samples(self, samples: Sequence[Sample], now: datetime | None = None) -> None:
        """Add ``samples`` to the time buckets holding ``now`` (the engine's clock) at every
        resolution of ``core.timeseries``, in one round trip; a sample's depth replaces the
        bucket's. Buckets outlive no resolution's window for long (``prune_buckets``)."""

    @abstractmethod
    def buckets(
        self,
        step: int,
        since: datetime,
        until: datetime,
        *,
        queue: str | None = None,
        name: str | None = None,
    ) -> list[Bucket]:
        """The stored buckets of resolution ``step`` starting in [``since``, ``until``), of one
        queue and/or job name (None: all); a queue's depth (name "") comes with its names."""

    @abstractmethod
    def prune_buckets(self, now: datetime | None = None) -> int:
        """Delete the buckets older than their resolution's window; answers how many (0
        where the engine expires them by itself)."""

    # -- the control plane ----------------------------------------------------------------
    @abstractmethod
    def controls(self, queues: Sequence[str] | None = None) -> dict[str, ControlState]:
        """The stored control state of these queues (all when None); a queue never paused or
        limited has none."""

    @abstractmethod
    def pause(
        self, queue: str, *, reason: str = "", by: str | None = None, now: datetime | None = None
    ) -> ControlState:
        """No claim takes jobs of ``queue`` once this returns; in-flight jobs run on. Audited
        with ``by`` and ``reason``; listening workers are woken to re-read it."""

    @abstractmethod
    def resume(
        self, queue: str, *, by: str | None = None, now: datetime | None = None
    ) -> ControlState:
        """Claims take ``queue``'s jobs again; idle workers are woken."""

    @abstractmethod
    def set_limits(
        self,
        queue: str,
        limits: QueueLimits | None,
        *,
        by: str | None = None,
        now: datetime | None = None,
    ) -> ControlState:
        """Store ``queue``'s live limits (they replace the settings' defaults); None removes
        them. Claims that start after this returns obey them."""

    @abstractmethod
    def handler_waits(self, queues: Sequence[str] | None = None) -> list[HandlerWait]:
        """Pending jobs a worker handed back for lack of a handler, by queue and name."""

    @abstractmethod
    def waiting_names(self) -> dict[tuple[str, str], int]:
        """Jobs waiting to run (pending, delayed included, and blocked) by (queue, name)."""

    # -- parent/child flows (only with ``supports_flows``; called by ``relay`` and ``sweeper``,
    # never by another backend) -------------------------------------------------------------
    def flow_state(self, parent_id: str) -> FlowState:
        """What ``collect`` sees: the tally, results and errors of a parent's children."""
        raise NotImplementedError

    def flow_states(self, parent_ids: Sequence[str]) -> dict[str, FlowState]:
        """``flow_state`` of several parents (the worker reads them with the claim that
        leased their ``collect``); a backend may answer in one round trip."""
        return {p: self.flow_state(p) for p in parent_ids}

    def deliver_reports(self, reports: Sequence[Report], now: datetime | None = None) -> int:
        """Record child reports on their parents' rows, once each; settle what is due."""
        raise NotImplementedError

    def report_terminal(self, ids: Sequence[str]) -> int:
        """Write reports for the terminal children among ``ids`` (same transaction)."""
        raise NotImplementedError

    def settle_reported(self, parent_ids: Sequence[str], now: datetime | None = None) -> list[str]:
        """Settle the due parents among ``parent_ids`` in a transaction of their own (the
        relay's step after an ack recorded reports on them, the flow sweeper's first check);
        answers the parents settled."""
        raise NotImplementedError

    def unsent_for(self, job_ids: Sequence[str], kind: str) -> set[str]:
        """The ids among ``job_ids`` that still have an unsent outbox row of ``kind``."""
        raise NotImplementedError

    def child_states(self, ids: Sequence[str]) -> dict[str, str]:
        """The state of each of these jobs that exists here (a backend may answer in one
        round trip)."""
        return {i.job_id: i.state for i in (self.get(j) for j in ids) if i is not None}

    # -- the flow sweeper's verbs (``sweeper/flow_repair.py`` runs the algorithm) ----------
    def waiting_parents(self, after: str, limit: int) -> list[str]:
        """Ids of parents parked in ``waiting_children``, in id order, after ``after``."""
        raise NotImplementedError

    def pending_children(self, parent_id: str) -> list[tuple[str, str]]:
        """``(child id, backend alias)`` of the parent's children that have not reported."""
        raise NotImplementedError

    def reland(self, parent_id: str, child_ids: Sequence[str], now: datetime | None = None) -> int:
        """Land these unreported children again from the parent's manifest (their full
        specs are there), only while the parent still waits for them (checked atomically
        with the landing); answers how many were landed."""
        raise NotImplementedError

    def cascade_due(self, limit: int) -> list[str]:
        """Parents that settled fail-fast or were cancelled while children may still run."""
        raise NotImplementedError

    def cascade(
        self, parent_id: str, now: datetime | None = None
    ) -> tuple[int, list[tuple[str, str]]]:
        """Cancel the parent's unfinished children here; answers how many, and the
        ``(backend alias, child id)`` of its unreported children on other backends."""
        raise NotImplementedError

    def cascade_done(self, parent_id: str) -> None:
        """Nothing is left to cancel for this parent elsewhere (a no-op where
        ``cascade_due`` is derived from the rows themselves)."""

    # -- an engine's own outbox (only with ``has_outbox``) ---------------------------------
    def take_outbox(self, limit: int, after: str = "") -> list[OutboxItem]:
        """Lease up to ``limit`` unsent entries after ``after`` (an earlier item's ``ref``)
        for this relay; an entry whose lease runs out is offered again."""
        raise NotImplementedError

    def outbox_done(self, items: Sequence[OutboxItem], error: str | None = None) -> None:
        """Delivered: forget these entries; with ``error``: keep them, count the attempt."""
        raise NotImplementedError

    def send_unsent(self, limit: int = 500) -> int:
        """With ``sends_later``: send jobs whose message a crash left unsent."""
        raise NotImplementedError

    # -- what a burst worker waits for ----------------------------------------------------
    def backlog(self, queues: Sequence[str]) -> Backlog:
        """What a burst worker still waits for (``due``: pending and due, in flight, parents
        waiting for their children, outbox entries on their way here) and what it leaves
        (``delayed``: pending, not due yet; the first due at ``next_due_at``), by the
        engine's clock."""
        raise NotImplementedError

    def outstanding(self, queues: Sequence[str]) -> int:
        """Everything a burst worker with ``--wait-delayed`` waits for: ``backlog``'s due
        and delayed jobs."""
        left = self.backlog(queues)
        return left.due + left.delayed

    def now(self) -> datetime:
        """The engine's clock (for display and for computing retention cut-offs)."""
        raise NotImplementedError

    # -- waking --------------------------------------------------------------------------
    def listener(self, queues: Sequence[str]) -> Any:
        """A ``Listener`` for idle workers, or None to poll. Only with ``supports_listen``."""
        return None

    def deployment_warnings(self) -> list[str]:
        """Risks of how the engine is run (e.g. a Redis that may evict jobs), one line each,
        for the worker's start-up banner; ``check()`` reports the same to ``check --deploy``."""
        return []

    def check(self, queues: Sequence[str] = ()) -> Iterable[CheckMessage]:
        """Deployment checks beyond settings (run by ``manage.py check --deploy``);
        ``queues``: those of the registered jobs, for checks made per queue."""
        return ()

    def on_unavailable(self) -> None:
        """Called after an unavailable error: drop broken connections so the next call
        reconnects."""

    def close(self) -> None:
        """Release connections held by this backend object (not Django's own)."""
