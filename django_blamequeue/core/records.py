"""Value objects that cross the backend boundary, and the public JobInfo / EnqueuedJob."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.states import Reason, State
from django_blamequeue.core.texts import error_text, storable, traceback_text


@dataclass(frozen=True, slots=True, kw_only=True)
class NewJob:
    """A job as the facade hands it to ``Backend.enqueue_many`` (already validated)."""

    job_id: str
    queue: str
    name: str
    payload: Encoded
    priority: int = 0
    delay: float | None = None  # seconds after the engine's now
    run_at: datetime | None = None  # absolute; wins over delay
    #: Not started by then → cancelled as expired: seconds after the engine's now at the
    #: insert, or an absolute time (UTC).
    expires: float | datetime | None = None
    max_attempts: int = 3
    timeout: float | None = None
    classification: str | None = None
    trace_id: str | None = None
    dedupe_key: str | None = None
    flow_id: str | None = None
    parent_id: str | None = None
    flow_key: str | None = None  # the node's name inside its flow
    flow_phase: str | None = None  # "fan_out" for a @flow parent
    flow_mode: str | None = None  # on_child_failure of a @flow parent
    parent_backend: str | None = None  # where a child's report goes
    flow_depth: int = 0
    blocked: bool = False  # True for a DAG child with dependencies
    depends_on: tuple[str, ...] = ()  # job ids (DAG)
    concurrency_key: str | None = None  # the key of the queue's per-key limits
    about: str | None = None  # "app_label.model_name:pk" (origin.about_key)
    origin: Mapping[str, Any] | None = None  # the blame trail (origin.capture)
    # Unique jobs (core/unique.py): the key, the states that hold it (",pending,blocked,"),
    # seconds it is held at most (None: while the states say), what a conflict does.
    unique_key: str | None = None
    unique_states: str | None = None
    unique_window: float | None = None
    unique_mode: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EnqueuedJob:
    """What ``enqueue`` answers: the id, and whether an existing job was returned instead.

    It is also a handle on the job (``jobs/waiting.py`` answers, polling its backend): ``info()``
    now, ``wait()`` until it ends, ``result()`` its return value or a clear error.
    """

    job_id: str
    queue_name: str
    backend: str
    deduplicated: bool = False
    #: A unique job's conflict: ``"skip"``, ``"replace"`` or ``"debounce"``, what this call
    #: did to the job that holds the key (``job_id``); None when the job was stored.
    conflict: str | None = None

    def info(self) -> JobInfo | None:
        """The job as its backend has it now (None: not there, or not yet)."""
        return _waiter().info(self)

    def wait(self, timeout: float | None = None, *, poll: float = 1.0) -> JobInfo:
        """Poll until the job is done, failed or cancelled, and answer it (whatever the end);
        past ``timeout`` seconds raise ``ResultTimeout``, which names the state it is in."""
        return _waiter().wait(self, timeout, poll)

    def result(self, timeout: float | None = None, *, poll: float = 1.0) -> Any:
        """``wait``, then the handler's return value; ``JobFailed`` (code ``JOB_FAILED``) if
        the job ended in the DLQ, ``JobWasCancelled`` (``JOB_CANCELLED``) if cancelled."""
        return _waiter().result(self, timeout, poll)


class Waiter(Protocol):
    """What ``EnqueuedJob``'s handle methods ask of the layers above (``waiting.Waiter``)."""

    def info(self, job: EnqueuedJob) -> JobInfo | None: ...
    def wait(self, job: EnqueuedJob, timeout: float | None, poll: float) -> JobInfo: ...
    def result(self, job: EnqueuedJob, timeout: float | None, poll: float) -> Any: ...


_waiters: list[Waiter] = []


def install_waiter(waiter: Waiter) -> None:
    """Called once the app is ready (``apps.py``): the handle methods work from then on."""
    _waiters[:] = [waiter]


def _waiter() -> Waiter:
    if not _waiters:
        raise RuntimeError("django_blamequeue is not ready: add it to INSTALLED_APPS")
    return _waiters[0]


#: The records below are made for every job a worker runs (a claim's rows, each attempt's
#: decision, its ack and the answer): plain slotted dataclasses, not frozen ones — a frozen
#: dataclass sets each field through ``object.__setattr__`` (3.3 µs for a ``Claimed`` against
#: 0.9 µs, docs/perf-notes.md). Nothing changes them once made; treat them as read-only.
@dataclass(slots=True, kw_only=True)
class Claimed:
    """A leased job: only the holder of ``token`` may ack it."""

    job_id: str
    queue: str
    name: str
    payload: Encoded
    token: str
    attempt: int
    max_attempts: int
    lease_expires_at: datetime
    priority: int = 0
    timeout: float | None = None
    trace_id: str | None = None
    classification: str | None = None
    flow_id: str | None = None
    parent_id: str | None = None
    available_at: datetime | None = None
    created_at: datetime | None = None
    flow_phase: str | None = None
    flow_mode: str | None = None
    flow_depth: int = 0
    concurrency_key: str | None = None
    snoozes: int = 0  # how often the job snoozed before this attempt
    #: Expired leases so far: a job that stalled before may be on probation (it runs alone).
    stalls: int = 0
    #: Why the stored row cannot be read (a field of the wrong type): the job is failed as
    #: ``bad_job`` without running, and the claim's other jobs run as usual.
    problem: str | None = None
    #: The JSON text an earlier attempt saved with ``ctx.checkpoint`` (None: nothing yet),
    #: read with the lease, so it is the value the previous attempt left.
    checkpoint: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildSpec:
    """One child of a fan-out, fully specified so a repair can re-enqueue it from the row."""

    key: str
    job: NewJob
    backend: str  # the child's backend alias


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """A child's terminal outcome, on its way to the parent's dependency row."""

    parent_id: str
    child_id: str
    state: str
    result: bytes | None = None
    result_type: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboxItem:
    """An entry of an engine's own outbox, taken by a relay: deliver it, then mark it done.

    ``problem`` says why an entry could not be read; delivering it fails with that text, so
    the relay counts and keeps it instead of stopping on it.
    """

    ref: str  # the engine's id of the entry
    kind: str  # "enqueue" or "report"
    backend: str  # the alias of the backend it is bound for
    job: NewJob | None = None
    report: Report | None = None
    problem: str | None = None


@dataclass(slots=True, kw_only=True)
class Transition:
    """The decision of ``core.lifecycle`` for one finished attempt; the backend applies it."""

    state: State
    delay: float = 0.0  # RETRY: seconds after now before the job is available again
    result: Encoded | None = None
    error: str | None = None
    #: The exception's class path (``builtins.ValueError``) when the error is an exception's;
    #: written with every error, so it never describes an older one.
    error_type: str | None = None
    traceback: str | None = None
    reason: Reason | None = None
    give_back_attempt: bool = False  # graceful release, a snooze, a hand-back
    snoozed: bool = False  # the handler raised Snooze: count it on the job
    yields_to_cancel: bool = True  # a pending cancel request turns this into CANCELLED
    children: tuple[ChildSpec, ...] = ()  # WAITING_CHILDREN: the fan-out manifest

    def __post_init__(self) -> None:
        """Texts every engine can store (``texts.storable``): no NUL, bounded."""
        if self.error is not None:
            self.error = error_text(self.error)
        if self.error_type is not None:
            self.error_type = storable(str(self.error_type), 255)
        if self.traceback is not None:
            self.traceback = traceback_text(self.traceback)


@dataclass(slots=True, kw_only=True)
class Ack:
    job_id: str
    token: str
    transition: Transition
    #: The worker that ran the attempt (its registry id), for the attempt history.
    worker: str | None = None


@dataclass(slots=True, kw_only=True)
class AckResult:
    """``ok`` False means the token was stale (``LOCK_LOST``) and nothing changed."""

    job_id: str
    ok: bool
    state: State | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectsFence:
    """What ``Backend.fence_effects`` answers inside an atomic run's transaction.

    ``applied``: the fenced ack is part of the transaction (``state`` where it took the job):
    commit, nothing is owed afterwards. ``stale``: the lease is no longer this run's: roll
    back. ``marked``: the job's completion mark is part of the transaction (the engine's ack
    cannot be): commit, then ack as usual. ``already``: another run of this job committed
    its effects first: roll back, and complete the job with that run's ``result``.
    """

    kind: str  # "applied" | "stale" | "marked" | "already"
    state: State | None = None
    result: Encoded | None = None
    attempt: int | None = None  # "already": the attempt whose effects stand


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseSignals:
    """What a heartbeat learns about the leases a worker holds."""

    lost: frozenset[str] = frozenset()
    cancel_requested: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True, kw_only=True)
class RescueReport:
    repended: int = 0
    failed: int = 0
    cancelled: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelResult:
    """``cancelled``: now terminal. ``requested``: running; the worker will interrupt it."""

    found: bool
    cancelled: bool = False
    requested: bool = False
    state: State | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStats:
    backend: str
    queue: str
    counts: Mapping[str, int] = field(default_factory=dict)
    oldest_pending_age: float | None = None  # seconds
    #: Jobs that finished done / failed within the last hour; None if the engine can't tell.
    done_last_hour: int | None = None
    failed_last_hour: int | None = None
    #: Pending jobs not due yet (delayed, or retrying after a backoff; among ``pending``),
    #: and seconds until the first of them comes due (None: there is none).
    delayed: int = 0
    next_delayed_in: float | None = None
    #: Jobs cancelled as expired (not started before ``expires_at``) within the last hour.
    expired_last_hour: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Backlog:
    """What a burst worker looks at (``Backend.backlog``): ``due`` is the work it waits for
    (pending and due, in flight, parents waiting for children, reports on their way);
    ``delayed`` the pending jobs not due yet, the first of them due at ``next_due_at``."""

    due: int = 0
    delayed: int = 0
    next_due_at: datetime | None = None

    def finished(self, clock: Callable[[], datetime], *, wait_delayed: bool = False) -> bool:
        """Nothing left to wait for. ``clock`` (the engine's, read only when it matters, after
        the backlog) catches a job counted delayed that came due while it was read: a settle
        or a retry committed between the count's clock reading and its snapshot."""
        if self.due or (wait_delayed and self.delayed):
            return False
        return self.next_due_at is None or self.next_due_at > clock()


@dataclass(frozen=True, slots=True, kw_only=True)
class PruneReport:
    jobs: int = 0
    audit: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class JobInfo:
    """A snapshot of one job, as ``get_job`` and ``dlq_list`` return it."""

    job_id: str
    backend: str
    queue: str
    name: str
    state: str
    payload: Any
    priority: int
    attempts: int
    max_attempts: int
    progress: int
    result: Any
    error: str | None
    traceback: str | None
    classification: str | None
    trace_id: str | None
    dedupe_key: str | None
    flow_id: str | None
    parent_id: str | None
    available_at: datetime | None
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    reason: str | None = None
    stalls: int = 0
    cancel_requested: bool = False
    timeout: float | None = None
    lease_expires_at: datetime | None = None
    depends_on: tuple[str, ...] = ()
    flow_key: str | None = None
    flow_phase: str | None = None
    children: Mapping[str, int] | None = None  # a flow parent's tally of children by state
    concurrency_key: str | None = None
    snoozes: int = 0  # how often the job snoozed (Snooze): no attempt spent for those
    about: str | None = None  # "app_label.model_name:pk" of the object it is about
    origin: Mapping[str, Any] | None = None  # site, request, user, parent_job, schedule, flow
    checkpoint: Any = None  # the value the job's last ``ctx.checkpoint`` stored (decoded)
    #: The class path of the exception behind ``error`` (``builtins.ValueError``); None for an
    #: error that is no exception (stalled, cancelled, bad job) and for a job without error.
    error_type: str | None = None
    unique_key: str | None = None  # the key of a unique job (docs/unique.md)
    unique_calls: int = 0  # enqueues of its key it absorbed (skipped, replaced, debounced)
    #: Not started by then, it is cancelled with reason ``expired`` (None: never expires).
    expires_at: datetime | None = None
    #: Stored encrypted (docs/encryption.md): ``payload``, ``result``, ``error`` and
    #: ``traceback`` here are already opened with ``ENCRYPTION_KEYS``.
    encrypted: bool = False


@dataclass(frozen=True, slots=True)
class KeyRotation:
    """One batch of ``Backend.rotate_keys``: rows read, rows rewritten (a row claimed or
    changed meanwhile is skipped), and where the next batch starts (the last id read, or the
    engine's own cursor; None: nothing was left). ``left_old``: rewritten jobs of which a
    copy the engine cannot rewrite still holds the old token (a sent SQS message)."""

    seen: int
    rewritten: int
    last_id: str | None
    left_old: int = 0


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    """How one child of a flow ended, as ``collect`` sees it (``FlowState.outcomes``):
    ``state`` done, failed, cancelled or pending; ``result`` a done child's return value;
    ``error`` a failed (or cancelled) child's error text; ``job_id`` and ``backend`` where
    the child is (``queue.get_job(job_id, backend=backend)`` has its ``error_type``)."""

    state: str
    result: Any = None
    error: str | None = None
    job_id: str | None = None
    backend: str | None = None

    @property
    def ok(self) -> bool:
        return self.state == "done"


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptInfo:
    """One attempt of a job as its history keeps it (``Backend.attempts``): which worker ran
    it, when, and how it ended — ``done``, ``retried`` (back to pending after a failure),
    ``failed`` (to the DLQ), ``cancelled`` or ``stalled`` (its lease expired). ``attempt``
    restarts at 1 after a DLQ retry; ``seq`` orders the whole history."""

    job_id: str
    seq: int
    attempt: int
    outcome: str
    started_at: datetime | None = None
    finished_at: datetime | None = None
    worker: str | None = None
    reason: str | None = None
    error_type: str | None = None
    error: str | None = None
    traceback: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowState:
    """What ``collect`` sees: the children's tally, results and errors by key."""

    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    pending: int = 0
    results: Mapping[str, Any] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)
    states: Mapping[str, str] = field(default_factory=dict)
    #: Each child's job id and backend alias, by key.
    jobs: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.completed + self.failed + self.cancelled + self.pending

    @property
    def outcomes(self) -> dict[str, ChildOutcome]:
        """Every child's outcome by key, in key order — what a Celery chord's error callback
        and body see together (docs/flows.md, "Celery's group and chord")."""
        return {
            key: ChildOutcome(
                self.states[key],
                self.results.get(key),
                self.errors.get(key),
                *self.jobs.get(key, (None, None)),
            )
            for key in sorted(self.states)
        }
