"""Leases in the job table: renewals, lease signals, progress and the rescue of expired
leases, each a fenced write (the lease token in its WHERE clause).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest

from django_blamequeue import audit
from django_blamequeue.backends.jobtable import sql
from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.backends.rescuelog import Rescued, log_rescued
from django_blamequeue.core.lifecycle import rescue
from django_blamequeue.core.records import LeaseSignals
from django_blamequeue.core.rules import STALLED_MESSAGE
from django_blamequeue.core.states import State

if TYPE_CHECKING:
    from django_blamequeue.backends.jobtable.attempts import Attempts
    from django_blamequeue.backends.jobtable.flows import Flows

ACK_CHUNK = 500
#: The columns ``Leases.rescue_rows`` takes, in order.
RESCUE_COLUMNS = (
    "id",
    "attempts",
    "max_attempts",
    "stalls",
    "cancel_requested",
    "queue",
    "name",
    "alone_token",
    "lease_token",
)


class Leases:
    """Held leases in the job table: each write fenced by the token, and the rescue."""

    def __init__(self, table: JobTable, flows: Flows, attempts: Attempts) -> None:
        self.table = table
        self.flows = flows  # a rescue that ends a job reports it and cascades its cancel
        self.attempts = attempts  # a rescued lease is a stalled attempt in the history

    def extend(self, job_id: str, token: str, seconds: float, now: datetime | None = None) -> bool:
        with transaction.atomic(using=self.table.db):
            until = self.table.clock(now) + timedelta(seconds=seconds)
            return self._fenced_update(
                job_id,
                token,
                audit.LEASE_EXTENDED,
                {"seconds": seconds},
                lease_expires_at=Greatest(F("lease_expires_at"), Value(until)),
            )

    def _fenced_update(
        self, job_id: str, token: str, action: str, data: dict[str, Any], **fields: Any
    ) -> bool:
        """Update a held lease's row (only with the right token); audit it if it changed."""
        with transaction.atomic(using=self.table.db):
            held = self.table.jobs().filter(id=job_id, lease_token=token, state=State.INFLIGHT)
            changed = bool(held.update(**fields))
            if changed and audit.needed(action):
                event = audit.Event(
                    action=action, job_id=job_id, backend=self.table.alias, data=data
                )
                audit.record([event], using=self.table.db)
        return changed

    def renew(
        self, leases: Sequence[tuple[str, str]], seconds: float, now: datetime | None = None
    ) -> frozenset[str]:
        """Renew the held leases among ``leases``; answer the lost ids."""
        if not leases:
            return frozenset()
        renewed = {r[0] for r in self.renew_rows(leases, seconds, now)}
        return frozenset(j for j, _ in leases if j not in renewed)

    def renew_rows(
        self,
        leases: Sequence[tuple[str, str]],
        seconds: float,
        now: datetime | None,
        returning: str = "id",
    ) -> list[tuple[Any, ...]]:
        """Renew the held leases among ``leases`` (one statement per 500); answer
        ``returning`` of each renewed row."""
        table = self.table
        renewed: list[tuple[Any, ...]] = []
        with transaction.atomic(using=table.db):
            t = table.clock(now)
            expiry = table.adapt(t + timedelta(seconds=seconds))
            for start in range(0, len(leases), ACK_CHUNK):
                chunk = leases[start : start + ACK_CHUNK]
                params: list[Any] = [expiry, expiry]
                for job_id, token in chunk:
                    params += [job_id, token]
                statement = sql.renew_many(
                    table.connection.vendor, len(chunk), table.name, returning
                )
                with table.connection.cursor() as cur:
                    cur.execute(statement, params)
                    renewed += [tuple(r) for r in cur.fetchall()]
        return renewed

    def signals(self, leases: Sequence[tuple[str, str]]) -> LeaseSignals:
        if not leases:
            return LeaseSignals()
        held = dict(leases)
        rows = (
            self.table.jobs()
            .filter(id__in=list(held))
            .values_list("id", "lease_token", "state", "cancel_requested")
        )
        seen: set[str] = set()
        lost: set[str] = set()
        cancel: set[str] = set()
        for job_id, token, state, cancel_requested in rows:
            seen.add(job_id)
            if token != held[job_id] or state != State.INFLIGHT:
                lost.add(job_id)
            elif cancel_requested:
                cancel.add(job_id)
        lost.update(set(held) - seen)
        return LeaseSignals(lost=frozenset(lost), cancel_requested=frozenset(cancel))

    def run_alone(self, job_id: str, token: str) -> bool:
        with transaction.atomic(using=self.table.db):
            held = self.table.jobs().filter(id=job_id, lease_token=token, state=State.INFLIGHT)
            return bool(held.update(alone_token=token))

    def set_progress(self, job_id: str, token: str, progress: int) -> bool:
        return self._fenced_update(
            job_id, token, audit.PROGRESS, {"progress": progress}, progress=progress
        )

    def rescue_rows(
        self, rows: Sequence[tuple[Any, ...]], t: datetime, max_stalled: int
    ) -> dict[State, list[tuple[Any, ...]]]:
        """Apply the rescue of expired leases, inside the caller's transaction.

        ``rows``: ``RESCUE_COLUMNS`` of inflight rows whose lease expired before ``t``.
        ``core.lifecycle.rescue`` decides each: back to pending (stall + 1), or failed as
        stalled (a stall counts past ``max_stalled`` only for a lease marked ``run_alone``);
        a cancel request makes it cancelled. Each UPDATE is fenced by (inflight, expired),
        so a row renewed meanwhile is left alone. Answers the rows by the state they were
        sent to, and logs each (after commit).
        """
        table, alias = self.table, self.table.alias
        groups: dict[State, list[tuple[Any, ...]]] = {s: [] for s in State}
        for row in rows:
            _job_id, attempts, max_attempts, stalls, cancel_requested, _q, _n, alone, token = row
            to = rescue(
                attempts=attempts,
                max_attempts=max_attempts,
                stalls=stalls + 1,
                max_stalled=max_stalled,
                cancel_requested=bool(cancel_requested),
                alone=alone is not None and alone == token,
            )
            groups[to].append(row)
        if rows:
            self.attempts.stalled([r[0] for r in rows], t, STALLED_MESSAGE)
        fence = {"state": State.INFLIGHT, "lease_expires_at__lt": t}
        common = {
            "stalls": F("stalls") + 1,
            "lease_token": None,
            "lease_expires_at": None,
            "updated_at": t,
        }
        msg = STALLED_MESSAGE
        if groups[State.PENDING]:
            table.jobs().filter(id__in=[r[0] for r in groups[State.PENDING]], **fence).update(
                state=State.PENDING,
                available_at=t,
                error=msg,
                error_type=None,
                reason="stalled",
                **common,
            )
        if groups[State.FAILED]:
            table.jobs().filter(id__in=[r[0] for r in groups[State.FAILED]], **fence).update(
                state=State.FAILED,
                finished_at=t,
                error=msg,
                error_type=None,
                reason="stalled",
                **common,
            )
            self.flows.report_terminal([r[0] for r in groups[State.FAILED]])
        if groups[State.CANCELLED]:
            ids = [r[0] for r in groups[State.CANCELLED]]
            table.jobs().filter(id__in=ids, **fence).update(
                state=State.CANCELLED, finished_at=t, reason="cancelled", **common
            )
            self.flows.report_terminal(ids)
            self.flows.cascade_cancel(ids, t)
        table.notify([r[5] for r in groups[State.PENDING]])
        events = [
            audit.Event(
                action=audit.STALLED,
                job_id=r[0],
                queue=r[5],
                backend=alias,
                attempt=r[1],
                data={"to": to.value, "stalls": r[3] + 1, "name": r[6]},
            )
            for to, grp in groups.items()
            for r in grp
        ] + [
            audit.Event(
                action=audit.DLQ_WRITE,
                job_id=r[0],
                queue=r[5],
                backend=alias,
                attempt=r[1],
                data={"reason": "stalled", "error": msg},
            )
            for r in groups[State.FAILED]
        ]
        audit.record(events, using=table.db)
        rescued = _rescued(groups)
        transaction.on_commit(lambda: log_rescued(alias, rescued), using=table.db)
        return groups


def _rescued(groups: dict[State, list[tuple[Any, ...]]]) -> list[Rescued]:
    return [
        (job_id, name, queue, to.value, attempts, max_attempts, stalls + 1)
        for to, rows in groups.items()
        for job_id, attempts, max_attempts, stalls, _cancel, queue, name, *_ in rows
    ]
