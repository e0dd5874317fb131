"""Audit events: a row per event (per ``AUDIT`` level) and the ``audit_event`` signal.

Backends call ``record`` inside the transaction that changes the job, so on the local backend
the row commits or rolls back with the state change; the signal goes out only after commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from django_blamequeue.conf import get_settings
from django_blamequeue.models import AuditEvent
from django_blamequeue.signals import audit_event

logger = logging.getLogger("django_blamequeue.audit")

ENQUEUE = "system.queue.enqueue"
CONSUME_START = "system.queue.consume.start"
CONSUME_SUCCESS = "system.queue.consume.success"
CONSUME_FAILURE = "system.queue.consume.failure"
DLQ_WRITE = "system.queue.dlq.write"
DLQ_RETRY = "system.queue.dlq.retry"
LEASE_EXTENDED = "system.queue.lease.extended"
PROGRESS = "system.queue.progress"
CHECKPOINT = "system.queue.checkpoint"
PURGE = "system.queue.purge"
FLOW_ENQUEUE = "system.queue.flow.enqueue"
FLOW_SETTLE = "system.queue.flow.settle"
FLOW_CANCEL = "system.queue.flow.cancel"
FLOW_FAN_OUT = "system.queue.flow.fan_out"
FLOW_REPORT = "system.queue.flow.report"
FLOW_CASCADE = "system.queue.flow.cascade"
SCHEDULE_FIRE = "system.queue.schedule.fire"
SCHEDULE_SKIP = "system.queue.schedule.skip"  # overlap="skip": the last run still going
CANCEL = "system.queue.cancel"
CANCEL_REQUESTED = "system.queue.cancel.requested"
EXPIRE = "system.queue.expire"  # cancelled: not started before its expires_at
RELEASE = "system.queue.release"
STALLED = "system.queue.stalled"
LOCK_LOST = "system.queue.lock_lost"
#: An atomic run found another run's effects committed (redis): its own writes rolled back.
EFFECTS_DUPLICATE = "system.queue.effects.duplicate"
PRUNE = "system.queue.prune"
PAUSE = "system.queue.pause"
RESUME = "system.queue.resume"
LIMITS = "system.queue.limits"
SNOOZE = "system.queue.snooze"
#: Operators' bulk edits of jobs (``Backend.delete_jobs``, ``move_jobs``, ``set_priority``).
DELETE = "system.queue.delete"
MOVE = "system.queue.move"
PRIORITY = "system.queue.priority"
NO_HANDLER = "system.queue.no_handler"  # handed back: this worker has no handler for it
#: An enqueue of a held unique key absorbed by its holder (``data["outcome"]``: skip,
#: replace, debounce); the holder's id is the event's job id.
UNIQUE = "system.queue.unique"
WORKFLOW_EVENT = "system.queue.workflow.event"  # queue.send_event (docs/workflows.md)
WORKFLOW_RERUN = "system.queue.workflow.rerun"  # queue.rerun_workflow
ADMIN_PREFIX = "system.queue.admin."

#: The happy path of every job: recorded as rows only with ``AUDIT = "all"``.
HIGH_VOLUME = frozenset(
    {
        ENQUEUE,
        CONSUME_START,
        CONSUME_SUCCESS,
        PROGRESS,
        CHECKPOINT,
        LEASE_EXTENDED,
        RELEASE,
        FLOW_REPORT,
        NO_HANDLER,
        UNIQUE,
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    action: str
    job_id: str | None = None
    queue: str | None = None
    backend: str | None = None
    attempt: int | None = None
    user: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


def wanted_as_row(action: str, level: str) -> bool:
    if level == "off":
        return False
    if level == "all":
        return True
    return action not in HIGH_VOLUME


def needed(action: str) -> bool:
    """Cheap pre-check so hot paths skip building events nobody will see."""

    return bool(audit_event.receivers) or wanted_as_row(action, get_settings().audit)


def start_events(claimed: Iterable[Any], backend: str) -> list[Event]:
    """``consume.start`` for each claimed job (every backend's), or nothing if nobody wants it."""
    if not needed(CONSUME_START):
        return []
    return [
        Event(
            action=CONSUME_START,
            job_id=c.job_id,
            queue=c.queue,
            backend=backend,
            attempt=c.attempt,
            data={"name": c.name},
        )
        for c in claimed
    ]


def lock_lost(job_id: str, backend: str, wanted: str) -> Event:
    """An ack refused for a stale lease token (``LOCK_LOST``): nothing changed."""
    return Event(action=LOCK_LOST, job_id=job_id, backend=backend, data={"wanted": wanted})


def ack_events(
    transition: Any,
    state: Any,
    *,
    job_id: str,
    queue: str,
    backend: str,
    attempt: int,
    name: str,
    happy: bool = True,
) -> list[Event]:
    """The events of one applied ack (every backend's): ``state`` is where the job went,
    ``transition`` what the worker decided; ``happy`` False skips the happy-path events
    (``needed(CONSUME_SUCCESS)`` said nobody wants them)."""
    t = transition
    base: dict[str, Any] = {"job_id": job_id, "queue": queue, "backend": backend}
    base["attempt"] = attempt
    if state == "done":
        return [Event(action=CONSUME_SUCCESS, data={"name": name}, **base)] if happy else []
    if state == "cancelled":
        return [Event(action=CANCEL, data={"name": name, "while": "running"}, **base)]
    if state == "pending" and t.snoozed:
        return [Event(action=SNOOZE, data={"name": name, "seconds": t.delay}, **base)]
    reason = t.reason.value if t.reason else None
    if state == "pending" and t.give_back_attempt and reason == "no_handler":
        event = Event(action=NO_HANDLER, data={"name": name, "retry_in": t.delay}, **base)
        return [event] if happy else []
    if state == "pending" and t.give_back_attempt:
        return [Event(action=RELEASE, data={"name": name}, **base)] if happy else []
    data = {"name": name, "error": t.error, "reason": t.reason.value if t.reason else None}
    if t.error_type is not None:  # each attempt's exception class: the job's row keeps the last
        data["error_type"] = t.error_type
    retry = {"retry_in": t.delay} if state == "pending" else {}
    events = [Event(action=CONSUME_FAILURE, data={**data, **retry}, **base)]
    if state == "failed":
        events.append(Event(action=DLQ_WRITE, data=data, **base))
    return events


def record(events: Iterable[Event], *, using: str | None) -> None:
    """Write rows for ``events`` in the current transaction on ``using``; signal after commit.

    ``using`` is the database alias whose transaction the state change runs in (the local
    backend's), or None for the default database (remote backends).
    """

    events = list(events)
    if not events:
        return
    level = get_settings().audit
    rows = [
        AuditEvent(
            action=e.action,
            job_id=e.job_id,
            queue=e.queue,
            backend=e.backend,
            attempt=e.attempt,
            user=e.user,
            data=dict(e.data),
        )
        for e in events
        if wanted_as_row(e.action, level)
    ]
    db = using or "default"
    if rows:
        AuditEvent.objects.using(db).bulk_create(rows)
    watched = [e for e in events if e.action in _watched_actions] if _watchers else []
    if logger.isEnabledFor(logging.DEBUG):
        for e in events:
            logger.debug(
                "%s job=%s queue=%s attempt=%s",
                e.action,
                e.job_id,
                e.queue,
                e.attempt,
                extra={"job_id": e.job_id, "queue": e.queue, "attempt": e.attempt},
            )
    if audit_event.receivers or watched:
        transaction.on_commit(lambda: _send(events, watched), using=db)


def _send(events: list[Event], watched: list[Event]) -> None:
    if audit_event.receivers:
        for e in events:
            audit_event.send_robust(
                sender=Event,
                event=e,
                action=e.action,
                job_id=e.job_id,
                queue=e.queue,
                backend=e.backend,
                attempt=e.attempt,
            )
    for actions, callback in _watchers:
        mine = [e for e in watched if e.action in actions]
        if mine:
            try:
                callback(mine)
            except Exception:
                logger.exception("a watcher of audit events (%r) raised", callback)


#: Callbacks of committed events by action (``watch``), and the union of their actions.
_watchers: list[tuple[frozenset[str], Callable[[list[Event]], None]]] = []
_watched_actions: frozenset[str] = frozenset()


def watch(actions: Iterable[str], callback: Callable[[list[Event]], None]) -> None:
    """Call ``callback`` with the events of these actions once they committed (the lifecycle
    signals of transitions no worker acked: ``jobs/events.py``). Installed once, from
    ``AppConfig.ready``; a second install of the same callback replaces the first."""
    global _watched_actions
    wanted = frozenset(actions)
    _watchers[:] = [(a, c) for a, c in _watchers if c != callback] + [(wanted, callback)]
    _watched_actions = frozenset().union(*(a for a, _ in _watchers))
