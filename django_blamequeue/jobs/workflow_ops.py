"""What people do to workflows from outside: send an event, wake what waits, re-run from a
step, read the timeline. The facade (``queue.send_event``, ``queue.rerun_workflow``,
``queue.workflow_steps``), the admin, ``blamequeue workflow`` and the sweeper's waker all
come here (docs/workflows.md).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef

from django_blamequeue import audit
from django_blamequeue.backends import all_backends, get_backend
from django_blamequeue.backends.base import Backend
from django_blamequeue.conf import get_settings
from django_blamequeue.core import validation
from django_blamequeue.core.records import EnqueuedJob, JobInfo
from django_blamequeue.core.states import TERMINAL as TERMINAL_STATES
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs import enqueueing, registry, steprows
from django_blamequeue.models import WorkflowEvent, WorkflowStep

logger = logging.getLogger("django_blamequeue.workflows")

WORKFLOW_EVENT = audit.WORKFLOW_EVENT
WORKFLOW_RERUN = audit.WORKFLOW_RERUN
#: Characters of a result shown in a timeline's preview.
PREVIEW = 120


def databases() -> list[str]:
    """The Django databases that hold workflow rows: each backend's ``effects_database``."""
    return sorted({b.effects_database for b in all_backends()})


# -- events ----------------------------------------------------------------------------------
def event_sealed(flag: bool | None) -> bool:
    """Whether an event's payload is stored sealed: ``flag`` when given, else whenever
    ``ENCRYPT`` encrypts any queue. An event belongs to no job until a workflow takes it, so
    the sender cannot know whether that job is encrypted; a deployment that encrypts
    anything seals every event, and a plain workflow opens it just the same."""
    if flag is not None:
        return flag
    setting = get_settings().encrypt
    return bool(setting)


def send_event(
    name: str,
    key: str = "",
    payload: Any = None,
    *,
    backend: str | None = None,
    keep: float | None = None,
    user: str | None = None,
    encrypted: bool | None = None,
) -> int:
    """Store event ``name``/``key`` for the first workflow that waits for it (a waiting one
    is woken once the caller's transaction commits); answers the event's id. Kept ``keep``
    seconds (default ``RETENTION["EVENTS"]``) if nobody takes it. Its payload is sealed
    with ``encrypted=True``, or by default wherever ``ENCRYPT`` encrypts any queue
    (``event_sealed``, docs/encryption.md)."""
    checked = validation.optional_text(name, "event name", 255)
    if checked is None:
        raise QueueError(ErrorCode.BAD_ARGUMENT, "event name is required")
    key = validation.optional_text(key or None, "event key", 255) or ""
    seconds = (
        validation.seconds(keep, "keep")
        if keep is not None
        else get_settings().retention_events or validation.MAX_SECONDS
    )
    text = steprows.encode(payload, "an event's payload")
    if event_sealed(encrypted):
        text = steprows.sealed(text)  # DECRYPT_FAILED without a key: nothing is stored
    target = get_backend(backend)
    db = target.effects_database
    now = target.now()
    with transaction.atomic(using=db):
        event = WorkflowEvent.objects.using(db).create(
            name=checked,
            key=key,
            payload=text,
            sent_at=now,
            expires_at=now + timedelta(seconds=seconds),
            sent_by=user or "",
        )
        audit.record(
            [
                audit.Event(
                    action=WORKFLOW_EVENT,
                    backend=target.alias,
                    user=user,
                    data={"event": checked, "key": key, "id": event.id},
                )
            ],
            using=db,
        )
        transaction.on_commit(lambda: wake_waiting(db, [(checked, key)]), using=db)
    return int(event.id)


def wake_waiting(db: str, events: Iterable[tuple[str, str]], now: datetime | None = None) -> int:
    """Wake the jobs waiting on ``db`` for any of ``events`` (name, key); never raises (the
    sweeper's waker catches what a failure here leaves)."""
    woken = 0
    try:
        for name, key in set(events):
            waiting = WorkflowStep.objects.using(db).filter(
                status="waiting", kind="event", event_name=name, event_key=key
            )
            woken += _wake(waiting.values_list("backend", "job_id"), now)
    except Exception:
        logger.warning("waking the workflows waiting for an event failed", exc_info=True)
    return woken


def _wake(rows: Iterable[tuple[str, str]], now: datetime | None) -> int:
    by_backend: dict[str, list[str]] = defaultdict(list)
    for alias, job_id in rows:
        by_backend[alias].append(job_id)
    woken = 0
    for alias, ids in by_backend.items():
        target = get_backend(alias)
        woken += target.resilience.call(lambda t=target, i=ids: t.wake(i, now))  # type: ignore[misc]
    return woken


@dataclass(frozen=True, slots=True)
class WakeReport:
    events: int = 0
    children: int = 0
    expired_events: int = 0


def wake_due(db: str, now: datetime, limit: int = 500) -> WakeReport:
    """The waker's pass over ``db`` (rule: a hook only hastens it): wake the workflows whose
    event is there, or whose child ended; forget events kept past their time."""
    open_event = WorkflowEvent.objects.using(db).filter(
        name=OuterRef("event_name"),
        key=OuterRef("event_key"),
        consumed_by__isnull=True,
        expires_at__gt=now,
    )
    waiting = WorkflowStep.objects.using(db).filter(status="waiting")
    matched = waiting.filter(kind="event").filter(Exists(open_event))
    events = _wake(matched.values_list("backend", "job_id")[:limit], now)
    children: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    child_waits = waiting.filter(kind="child").values_list(
        "child_backend", "backend", "job_id", "child_id"
    )
    for child_backend, alias, job_id, child_id in child_waits[:limit]:
        children[child_backend].append((alias, job_id, child_id))
    ended: list[tuple[str, str]] = []
    for child_backend, rows in children.items():
        target = get_backend(child_backend)
        ids = [child_id for _, _, child_id in rows]
        states = target.resilience.call(lambda t=target, i=ids: t.child_states(i))  # type: ignore[misc]
        ended += [(a, j) for a, j, c in rows if states.get(c) in TERMINAL_STATES]
    woken_children = _wake(ended, now)
    stale = WorkflowEvent.objects.using(db).filter(expires_at__lt=now)
    expired_ids = list(stale.values_list("id", flat=True)[:limit])
    expired = WorkflowEvent.objects.using(db).filter(id__in=expired_ids).delete()[0]
    return WakeReport(events=events, children=woken_children, expired_events=expired)


def forget_pruned(
    backend: Backend, before: datetime, after: str = "", batch: int = 500
) -> tuple[int, str]:
    """Delete the step rows of ``backend``'s jobs that retention removed (rows begun before
    ``before`` whose job is gone), looking at the next ``batch`` jobs by id after ``after``
    (one index range and one look-up per pass, however large the table). Answers the rows
    deleted and where the next pass goes on ("": from the start again)."""
    rows = WorkflowStep.objects.using(backend.effects_database).filter(backend=backend.alias)
    old = rows.filter(started_at__lt=before, job_id__gt=after).order_by("job_id")
    ids = list(old.values_list("job_id", flat=True).distinct()[:batch])
    if not ids:
        return 0, ""
    alive = backend.resilience.call(lambda: backend.child_states(ids))
    gone = [i for i in ids if i not in alive]
    deleted = rows.filter(job_id__in=gone).delete()[0] if gone else 0
    return deleted, ids[-1] if len(ids) == batch else ""


# -- the timeline ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class StepView:
    """One recorded step as people see it (``blamequeue workflow show``, the admin)."""

    number: int
    name: str
    kind: str
    status: str
    attempt: int
    started_at: datetime
    finished_at: datetime | None
    result_bytes: int
    preview: str
    error: str
    wake_at: datetime | None
    event: str
    child_id: str
    child_backend: str


def steps(job_id: str, backend: str | None = None) -> list[StepView]:
    """The recorded steps of ``job_id`` in replay order (empty: none recorded, or unknown)."""
    backends = [get_backend(backend)] if backend else all_backends()
    for db in sorted({b.effects_database for b in backends}):
        rows = list(WorkflowStep.objects.using(db).filter(job_id=job_id).order_by("seq"))
        if rows:
            return [_view(r) for r in rows]
    return []


def _view(r: WorkflowStep) -> StepView:
    text = r.result or ""
    return StepView(
        number=r.seq + 1,
        name=r.name,
        kind=r.kind,
        status=r.status,
        attempt=r.attempt,
        started_at=r.started_at,
        finished_at=r.finished_at,
        result_bytes=r.result_bytes,
        preview=text if len(text) <= PREVIEW else text[: PREVIEW - 1] + "…",
        error=r.error,
        wake_at=r.wake_at,
        event=f"{r.event_name}:{r.event_key}" if r.kind == "event" else "",
        child_id=r.child_id,
        child_backend=r.child_backend,
    )


# -- re-run from step N ----------------------------------------------------------------------
def rerun(
    job_id: str, from_step: int, *, backend: str | None = None, user: str | None = None
) -> EnqueuedJob:
    """A new run of ended workflow ``job_id`` that keeps its steps before ``from_step``
    (1-based) and runs the rest again: the steps are copied to the new job in the
    transaction that enqueues it, and the original stays as it was, its history intact.
    Audited with ``user``."""
    info, target = _find(job_id, backend)
    definition = registry.get(info.name)
    if definition is None or not definition.durable:
        raise QueueError(
            ErrorCode.NOT_A_WORKFLOW, f"job {job_id} ({info.name}) is not a durable workflow"
        )
    if info.state not in TERMINAL_STATES:
        raise QueueError(
            ErrorCode.BAD_ARGUMENT,
            f"job {job_id} is {info.state}: re-run a workflow once it ended (cancel it first)",
        )
    db = target.effects_database
    rows = list(WorkflowStep.objects.using(db).filter(job_id=job_id).order_by("seq"))
    if isinstance(from_step, bool) or not isinstance(from_step, int):
        raise QueueError(ErrorCode.BAD_ARGUMENT, f"from_step must be an int, not {from_step!r}")
    if not 1 <= from_step <= len(rows) + 1:
        raise QueueError(
            ErrorCode.BAD_ARGUMENT,
            f"from_step must be from 1 to {len(rows) + 1} (job {job_id} recorded {len(rows)} "
            f"steps), not {from_step}",
        )
    kept = [r for r in rows if r.seq < from_step - 1]
    new = enqueueing.new_job(
        info.queue,
        info.payload,
        definition=definition,
        name=info.name,
        priority=info.priority,
        max_attempts=info.max_attempts,
        backend=target.alias,
        cause={"rerun_of": job_id, "from_step": from_step},
    )
    event = audit.Event(
        action=WORKFLOW_RERUN,
        job_id=new.job_id,
        queue=new.queue,
        backend=target.alias,
        user=user,
        data={"rerun_of": job_id, "from_step": from_step, "kept_steps": len(kept)},
    )
    with transaction.atomic(using=db):
        WorkflowStep.objects.using(db).bulk_create(_copies(kept, new.job_id))
        [enqueued] = enqueueing.store(target, [new], [event])
    return enqueued


def _copies(rows: Sequence[WorkflowStep], job_id: str) -> list[WorkflowStep]:
    copies = []
    for r in rows:
        r.pk = None
        r.id = None
        r.job_id = job_id
        copies.append(r)
    return copies


def _find(job_id: str, backend: str | None) -> tuple[JobInfo, Backend]:
    for target in [get_backend(backend)] if backend else all_backends():
        info = target.resilience.call(lambda t=target: t.get(job_id))  # type: ignore[misc]
        if info is not None:
            return info, target
    raise QueueError(ErrorCode.UNKNOWN_JOB, f"no job {job_id}")
