"""Queue control on the job-table backends (local, the SQS ledger): the control rows (pause,
resume, live limits), and what the control plane reads from the job table (jobs that wait for
a handler, the names of waiting jobs).

A change is one transaction: the row, its audit row (with the acting user) and the wake-up,
which reaches listening workers at commit (``NOTIFY blamequeue_control``) and this process's
consumers (``wakeup.control_changed``). A claim never relies on a worker having heard it: the
unlimited claim skips queues whose row is ``limited`` (paused, or live limits set), and a
limited claim reads the row under its lock.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Count

from django_blamequeue import audit
from django_blamequeue.backends import wakeup
from django_blamequeue.backends.jobtable.table import CONTROL_CHANNEL, JobTable
from django_blamequeue.core.controls import ControlState, HandlerWait
from django_blamequeue.core.limits import QueueLimits
from django_blamequeue.core.states import Reason, State
from django_blamequeue.models import QueueControl


def state_of(row: QueueControl) -> ControlState:
    live = None
    if row.has_limits:
        live = QueueLimits(
            concurrency=row.concurrency,
            key_concurrency=row.key_concurrency,
            rate_limit=(row.rate_max, float(row.rate_per))
            if row.rate_max is not None and row.rate_per is not None
            else None,
            key_rate_limit=(row.key_rate_max, float(row.key_rate_per))
            if row.key_rate_max is not None and row.key_rate_per is not None
            else None,
            key_weights=weights_from(row.key_weights),
        )
    return ControlState(
        queue=row.queue,
        paused=row.paused,
        reason=row.reason,
        paused_at=row.paused_at,
        paused_by=row.paused_by,
        live=live,
        version=row.version,
        updated_at=row.updated_at,
    )


def limit_fields(limits: QueueLimits | None) -> dict[str, Any]:
    """The row's limit columns for ``limits`` (None: no live limits)."""
    lim = limits or QueueLimits()
    rate, key_rate = lim.rate_limit, lim.key_rate_limit
    return {
        "has_limits": limits is not None,
        "concurrency": lim.concurrency,
        "key_concurrency": lim.key_concurrency,
        "rate_max": rate[0] if rate else None,
        "rate_per": rate[1] if rate else None,
        "key_rate_max": key_rate[0] if key_rate else None,
        "key_rate_per": key_rate[1] if key_rate else None,
        "key_weights": [list(pair) for pair in lim.key_weights] or None,
    }


def weights_from(stored: Any) -> tuple[tuple[str, int], ...]:
    """The ``key_weights`` column (JSON pairs, or NULL; text where a raw cursor read it) as
    ``QueueLimits.key_weights``."""
    if isinstance(stored, str):
        stored = json.loads(stored)
    return tuple((str(p), int(w)) for p, w in stored or ())


class ControlRows:
    """A job table's queue control: its rows, and what the control plane reads of its jobs."""

    def __init__(self, table: JobTable, *, listen: bool) -> None:
        self.table = table
        #: Workers LISTEN for control changes (the local backend on PostgreSQL).
        self.listen = listen

    def controls(self, queues: Sequence[str] | None = None) -> dict[str, ControlState]:
        rows = QueueControl.objects.using(self.table.db).filter(backend=self.table.alias)
        if queues is not None:
            rows = rows.filter(queue__in=list(queues))
        return {r.queue: state_of(r) for r in rows}

    def pause(
        self, queue: str, *, reason: str = "", by: str | None = None, now: datetime | None = None
    ) -> ControlState:
        return self._change(
            queue,
            audit.PAUSE,
            {"reason": reason},
            by,
            now,
            paused=True,
            reason=reason,
            paused_by=by,
        )

    def resume(
        self, queue: str, *, by: str | None = None, now: datetime | None = None
    ) -> ControlState:
        return self._change(
            queue, audit.RESUME, {}, by, now, paused=False, reason="", paused_by=None
        )

    def set_limits(
        self,
        queue: str,
        limits: QueueLimits | None,
        *,
        by: str | None = None,
        now: datetime | None = None,
    ) -> ControlState:
        data = {"limits": limits.describe() if limits is not None else None}
        return self._change(queue, audit.LIMITS, data, by, now, **limit_fields(limits))

    def _change(
        self,
        queue: str,
        action: str,
        data: dict[str, Any],
        by: str | None,
        now: datetime | None,
        **fields: Any,
    ) -> ControlState:
        """Update (or create) the queue's row, bump its version, audit it, wake workers."""
        with transaction.atomic(using=self.table.db):
            t = self.table.clock(now)
            rows = QueueControl.objects.using(self.table.db)
            rows.get_or_create(backend=self.table.alias, queue=queue)
            row = rows.select_for_update().get(backend=self.table.alias, queue=queue)
            was_paused = row.paused
            for name, value in fields.items():
                setattr(row, name, value)
            if "paused" in fields:
                row.paused_at = t if row.paused else None
            live = state_of(row).live
            row.limited = row.paused or (live is not None and not live.empty)
            row.version += 1
            row.updated_at = t
            row.save()
            event = audit.Event(
                action=action, queue=queue, backend=self.table.alias, user=by, data=data
            )
            audit.record([event], using=self.table.db)
            if self.listen:
                with self.table.connection.cursor() as cur:
                    cur.execute("SELECT pg_notify(%s, %s)", [CONTROL_CHANNEL, queue])
            transaction.on_commit(lambda: wakeup.control_changed([queue]), using=self.table.db)
            if was_paused and not row.paused:
                self.table.notify([queue])  # resumed: idle workers claim now
        return state_of(row)

    # -- what the control plane reads from the job table --------------------------------
    def handler_waits(self, queues: Sequence[str] | None = None) -> list[HandlerWait]:
        """Pending jobs a worker handed back for lack of a handler, by queue and name."""
        rows = self.table.jobs().filter(state=State.PENDING, reason=Reason.NO_HANDLER)
        if queues is not None:
            rows = rows.filter(queue__in=list(queues))
        counted = rows.order_by().values_list("queue", "name").annotate(n=Count("id"))
        return [HandlerWait(queue=q, name=n, count=c) for q, n, c in counted]

    def waiting_names(self) -> dict[tuple[str, str], int]:
        """Jobs waiting to run (pending, delayed included, and blocked) by (queue, name)."""
        rows = self.table.jobs().filter(state__in=[State.PENDING, State.BLOCKED])
        counted = rows.order_by().values_list("queue", "name").annotate(n=Count("id"))
        return {(q, n): c for q, n, c in counted}
