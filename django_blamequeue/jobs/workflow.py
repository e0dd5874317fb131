"""A durable job's replay: ``ctx.step``, ``ctx.sleep``, ``ctx.wait_for_event``, ``ctx.child``.

Each attempt runs the handler from the top. Every call of a step asks for the next place in
the job's record (``seq``), under its name and occurrence (the n-th step of that name): a
place already recorded answers its stored result without running anything; the first place
not recorded runs. A timer, a wait or a child that is not ready ends the attempt with
``Park`` (no attempt spent, no slot held: the job is pending until its due time, or until an
event or its child wakes it), and the next attempt replays up to it. docs/workflows.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from django_blamequeue import encryption
from django_blamequeue.backends import get_backend
from django_blamequeue.core import ids, validation
from django_blamequeue.core.states import State
from django_blamequeue.exceptions import (
    ChildFailed,
    ErrorCode,
    NonDeterministicWorkflow,
    Park,
    QueueError,
    WaitTimeout,
)
from django_blamequeue.jobs import enqueueing, steprows
from django_blamequeue.jobs.steprows import Fence, Stale, Taken
from django_blamequeue.models import WorkflowStep

if TYPE_CHECKING:
    from django_blamequeue.context import JobContext
    from django_blamequeue.jobs.registry import JobDefinition

#: How long a parked parent waits before it looks at its child again by itself; the
#: sweeper's waker wakes it as soon as the child ends (docs/workflows.md).
CHILD_RECHECK = 60.0
#: A wait without a timeout parks this long between looks (the waker wakes it sooner).
FOREVER = validation.MAX_SECONDS


class Workflow:
    """The replay state of one attempt of a durable job (``JobContext.workflow``)."""

    def __init__(self, ctx: JobContext, *, encrypted: bool = False) -> None:
        self.ctx = ctx
        #: The job is encrypted at rest: so are its steps' results and errors.
        self.encrypted = encrypted
        self.db = ctx.backend.effects_database
        self._rows: dict[int, WorkflowStep] | None = None
        self._seq = 0
        self._seen: Counter[str] = Counter()

    # -- the replay position ---------------------------------------------------------------
    @property
    def rows(self) -> dict[int, WorkflowStep]:
        if self._rows is None:
            self._rows = steprows.recorded(self.db, self.ctx.job_id)
        return self._rows

    def _next(self, name: str, kind: str) -> tuple[int, int, WorkflowStep | None]:
        """The next place: its seq, this name's occurrence, and its record (None: not yet
        recorded, or a failed try to run again). A record of another step there is
        ``NonDeterministicWorkflow``: the code asks for its steps in another order."""
        name = _text(name, "step name")
        seq = self._seq
        occurrence = self._seen[name]
        self._seq += 1
        self._seen[name] += 1
        row = self.rows.get(seq)
        if row is None:
            return seq, occurrence, None
        if (row.name, row.occurrence, row.kind) != (name, occurrence, kind):
            if row.status == "failed":  # only a failed try: this run may record another
                return seq, occurrence, row
            raise NonDeterministicWorkflow(
                f"job {self.ctx.job_id}: step {seq + 1} was recorded as {row.kind} "
                f"{row.name!r} (occurrence {row.occurrence}), but this replay asks for {kind} "
                f"{name!r} (occurrence {occurrence}) there; give a changed step a new name "
                "and keep the old ones in order (docs/workflows.md#replay-rules)"
            )
        return seq, occurrence, row

    def now(self) -> datetime:
        """The engine's clock: what decides a timer or a wait."""
        return self.ctx.now()

    def stamp(self) -> datetime:
        """A step's start and end, shown and never decided on: this host's clock (no round
        trip), or a test's moved one."""
        return self.ctx.clock() if self.ctx.clock is not None else timezone.now()

    def _row(self, seq: int, occurrence: int, name: str, kind: str, **fields: Any) -> WorkflowStep:
        now = self.stamp()
        values: dict[str, Any] = {"started_at": now, **fields}
        return WorkflowStep(
            job_id=self.ctx.job_id,
            backend=self.ctx.backend.alias,
            seq=seq,
            name=name,
            occurrence=occurrence,
            kind=kind,
            attempt=self.ctx.attempt,
            **values,
        )

    def _fence(self) -> Fence:
        return Fence(self.db, self.ctx.job_id, self.ctx.token, self.ctx.backend)

    def _commit(self, row: WorkflowStep, existing: WorkflowStep | None) -> WorkflowStep:
        """``row`` recorded in a transaction of its own (a plain step's, a timer's)."""
        try:
            with transaction.atomic(using=self.db):
                steprows.put(self._fence(), row, replacing=existing)
        except Stale:
            raise self._lock_lost(row.name) from None
        except Taken as taken:
            row = taken.row
        self.rows[row.seq] = row
        return row

    def _encode(self, value: Any, what: str) -> str:
        text = steprows.encode(value, what)
        return steprows.sealed(text) if self.encrypted else text

    def _error(self, exc: BaseException) -> str:
        text = f"{type(exc).__name__}: {exc}"[:4096]
        return steprows.sealed(text) if self.encrypted else text

    def _lock_lost(self, name: str) -> QueueError:
        return QueueError(
            ErrorCode.LOCK_LOST,
            f"job {self.ctx.job_id}: step {name!r} was not recorded, this attempt no longer "
            "holds the lease",
        )

    # -- steps --------------------------------------------------------------------------
    def step(
        self, name: str, fn: Callable[..., Any], args: Any, kwargs: Any, *, atomic: bool
    ) -> Any:
        kind = "atomic" if atomic else "step"
        seq, occurrence, existing = self._next(name, kind)
        if existing is not None and existing.status == "done":
            return steprows.decode(existing.result)
        row = self._row(seq, occurrence, name, kind, status="done")
        try:
            if atomic:
                row = self._run_atomic(row, existing, fn, args, kwargs)
            else:
                value = fn(*args, **kwargs)
                row.result = self._encode(value, f"the result of step {name!r}")
                row.result_bytes = steprows.size_of(row.result)
                row.finished_at = self.stamp()
                row = self._commit(row, existing)
        except Exception as exc:
            if not (isinstance(exc, QueueError) and exc.code == ErrorCode.LOCK_LOST):
                row.status, row.result, row.finished_at = "failed", None, self.stamp()
                row.error = self._error(exc)
                steprows.note_failure(self.db, row, existing)
            raise
        return steprows.decode(row.result)

    def _run_atomic(
        self,
        row: WorkflowStep,
        existing: WorkflowStep | None,
        fn: Callable[..., Any],
        args: Any,
        kwargs: Any,
    ) -> WorkflowStep:
        """``fn``'s writes and the step's row in one transaction, fenced: both or neither."""
        try:
            with transaction.atomic(using=self.db):
                value = fn(*args, **kwargs)
                row.result = self._encode(value, f"the result of step {row.name!r}")
                row.result_bytes = steprows.size_of(row.result)
                row.finished_at = self.stamp()
                steprows.put(self._fence(), row, replacing=existing)
        except Stale:
            raise self._lock_lost(row.name) from None
        except Taken as taken:  # another run committed this step: its writes stand, ours not
            row = taken.row
        self.rows[row.seq] = row
        return row

    def version(self, name: str, latest: int) -> int:
        """``latest``, recorded, for a run that reaches this place for the first time; 0
        for one that recorded another step here on code older than this marker (the place
        is then not taken: the old step answers it)."""
        marker = f"version:{_text(name, 'version name')}"
        if isinstance(latest, bool) or not isinstance(latest, int) or latest < 1:
            raise QueueError(
                ErrorCode.BAD_ARGUMENT, f"a version must be an int of at least 1, not {latest!r}"
            )
        row = self.rows.get(self._seq)
        if row is not None and row.status != "failed" and row.name != marker:
            return 0
        return int(self.step(marker, _same, (latest,), {}, atomic=False))

    # -- timers -------------------------------------------------------------------------
    def sleep_until(self, when: datetime, name: str) -> None:
        checked = validation.run_at(when)
        assert checked is not None
        when = checked
        seq, occurrence, row = self._next(name, "sleep")
        now = self.now()
        if row is None or row.status == "failed":
            row = self._row(seq, occurrence, name, "sleep", status="waiting", wake_at=when)
            row = self._commit(row, self.rows.get(seq))
        if row.status == "done":
            return
        assert row.wake_at is not None
        if now < row.wake_at:
            raise Park((row.wake_at - now).total_seconds())
        row.status, row.finished_at = "done", now
        self._commit(row, _as_read(row, "waiting"))

    def sleep(self, seconds: float, name: str) -> None:
        seconds = validation.delay(seconds) or 0.0
        seq = self._seq
        recorded = self.rows.get(seq)
        if recorded is not None and recorded.kind == "sleep" and recorded.wake_at is not None:
            self.sleep_until(recorded.wake_at, name)  # the first attempt fixed the due time
        else:
            self.sleep_until(self.now() + timedelta(seconds=seconds), name)

    # -- events -------------------------------------------------------------------------
    def wait_for_event(self, event: str, key: str, timeout: float | None) -> Any:
        event = _text(event, "event name")
        key = validation.optional_text(key or None, "event key", 255) or ""
        if timeout is not None:
            timeout = validation.seconds(timeout, "wait timeout")
        name = f"event:{event}"
        seq, occurrence, row = self._next(name, "event")
        if row is not None and row.status == "done":
            return steprows.decode(row.result)
        if row is not None and row.status == "timed_out":
            raise WaitTimeout(encryption.readable(row.error) or "")
        now = self.now()
        if row is None or row.status == "failed":
            deadline = now + timedelta(seconds=timeout) if timeout is not None else None
            row = self._row(
                seq,
                occurrence,
                name,
                "event",
                status="waiting",
                wake_at=deadline,
                event_name=event,
                event_key=key,
            )
            existing = self.rows.get(seq)
        else:
            existing = _as_read(row, "waiting")
        got = self._receive(row, existing, now)
        if got is not None:
            if got.status == "done":
                return steprows.decode(got.result)
            raise WaitTimeout(encryption.readable(got.error) or "")
        assert row.wake_at is None or row.wake_at > now
        raise Park((row.wake_at - now).total_seconds() if row.wake_at else FOREVER)

    def _receive(
        self, row: WorkflowStep, existing: WorkflowStep | None, now: datetime
    ) -> WorkflowStep | None:
        """In one fenced transaction: consume a waiting event into the step, or time the wait
        out, or record it as waiting. Answers the finished row, or None (park)."""
        try:
            with transaction.atomic(using=self.db):
                taken = steprows.take_event(
                    self.db, row.event_name, row.event_key, self.ctx.job_id, now
                )
                if taken is not None:
                    # an encrypted job's step holds the event sealed, however it was sent
                    kept = (
                        steprows.sealed(taken.payload)
                        if self.encrypted and taken.payload is not None
                        else taken.payload
                    )
                    row.status, row.result, row.finished_at = "done", kept, now
                    row.result_bytes = steprows.size_of(kept)
                elif row.wake_at is not None and row.wake_at <= now:
                    row.status, row.finished_at = "timed_out", now
                    text = (
                        f"WaitTimeout: no event {row.event_name!r} (key {row.event_key!r}) "
                        f"came by {row.wake_at.isoformat()}"
                    )
                    row.error = steprows.sealed(text) if self.encrypted else text
                elif existing is not None and existing.status == "waiting":
                    return None  # still waiting: nothing to write
                steprows.put(self._fence(), row, replacing=existing)
        except Stale:
            raise self._lock_lost(row.name) from None
        except Taken as taken_by:
            row = taken_by.row
        self.rows[row.seq] = row
        return row if row.status in ("done", "timed_out") else None

    # -- children -----------------------------------------------------------------------
    def child(self, name: str, definition: JobDefinition, payload: Any, options: Any) -> Any:
        seq, occurrence, row = self._next(name, "child")
        if row is not None and row.status == "done":
            return steprows.decode(row.result)
        if row is not None and row.status == "raised":
            error = encryption.readable(row.error) or ""
            raise ChildFailed(error, state=row.event_name or "failed", error=error)
        if row is None or row.status == "failed":
            row = self._enqueue_child(seq, occurrence, name, definition, payload, options)
        target, child_id = get_backend(row.child_backend), row.child_id
        info = target.resilience.call(lambda: target.get(child_id))
        if info is None or info.state not in (State.DONE, State.FAILED, State.CANCELLED):
            raise Park(CHILD_RECHECK)
        now = self.stamp()
        ended = _as_read(row, "waiting")
        row.finished_at = now
        if info.state == State.DONE:
            row.status = "done"
            row.result = self._encode(info.result, f"the result of child {name!r}")
            row.result_bytes = steprows.size_of(row.result)
        else:
            row.status, row.event_name = "raised", str(info.state)
            text = (
                f"ChildFailed: child job {info.job_id} ({info.name}) ended {info.state}"
                + (f": {info.error}" if info.error else "")
            )[:4096]
            row.error = steprows.sealed(text) if self.encrypted else text
        row = self._commit(row, ended)
        if row.status == "raised":
            error = encryption.readable(row.error) or ""
            raise ChildFailed(error, state=row.event_name, error=error)
        return steprows.decode(row.result)

    def _enqueue_child(
        self,
        seq: int,
        occurrence: int,
        name: str,
        definition: JobDefinition,
        payload: Any,
        options: Any,
    ) -> WorkflowStep:
        """The child job (its id fixed by the parent and the step, so a replay enqueues the
        same job again, which every backend keeps once) and the waiting step, recorded
        together where the child's backend joins the transaction."""
        child_id = ids.child_id(self.ctx.job_id, f"{name}#{occurrence}")
        job = enqueueing.new_job(
            options.pop("queue", definition.queue),
            payload,
            definition=definition,
            name=definition.name,
            job_id=child_id,
            **options,
        )
        target = get_backend(options.get("backend", definition.backend))
        row = self._row(
            seq,
            occurrence,
            name,
            "child",
            status="waiting",
            child_id=child_id,
            child_backend=target.alias,
        )
        existing = self.rows.get(seq)
        try:
            with transaction.atomic(using=self.db):
                steprows.put(self._fence(), row, replacing=existing)
                enqueueing.store(target, [job], [])
        except Stale:
            raise self._lock_lost(name) from None
        except Taken as taken:
            row = taken.row
        self.rows[row.seq] = row
        return row


def _same(value: int) -> int:
    return value


def _text(value: object, what: str) -> str:
    checked = validation.optional_text(value, what, 255)
    if checked is None:
        raise QueueError(ErrorCode.BAD_ARGUMENT, f"{what} is required")
    return checked


def _as_read(row: WorkflowStep, status: str) -> WorkflowStep:
    """A copy of ``row`` as it stands in the table (``status``), for ``put``'s check."""
    copy = WorkflowStep(id=row.id, status=status, attempt=row.attempt)
    return copy
