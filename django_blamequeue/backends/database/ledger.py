"""Writes shared by every backend whose jobs are rows of a Django database.

The local backend's queue and the SQS backend's ledger have the same columns (``JobFields``),
so the insert, lease renewals, progress and the rescue of expired leases are written once,
here, over ``self.model`` / ``self.table`` (the acks are in ``acks.py``). Each method runs in
the caller's transaction unless it says otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import OperationalError, transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest

from ... import audit
from ...core.lifecycle import rescue
from ...core.states import ACTIVE, State
from ...models import FlowDependency, JobFields
from ...records import EnqueuedJob, LeaseSignals, NewJob
from . import sql
from .base import CHANNEL, LedgerBase

ACK_CHUNK = 500
_ACTIVE = [s.value for s in ACTIVE]
_PENDING, _BLOCKED = State.PENDING.value, State.BLOCKED.value
_INSERT_COLUMNS = (
    "id",
    "queue",
    "name",
    "state",
    "payload",
    "content_type",
    "content_encoding",
    "priority",
    "available_at",
    "max_attempts",
    "timeout",
    "classification",
    "trace_id",
    "dedupe_key",
    "flow_id",
    "parent_id",
    "flow_key",
    "flow_phase",
    "flow_mode",
    "parent_backend",
    "flow_depth",
    "created_at",
    "updated_at",
)
_layouts: dict[tuple[str, str], tuple[tuple[tuple[str, str], ...], tuple[Any, ...]]] = {}


def _datetime_columns(model: type[JobFields]) -> frozenset[str]:
    return frozenset(
        str(f.column)
        for f in model._meta.concrete_fields
        if f.get_internal_type() == "DateTimeField"
    )


def _insert_layout(
    connection: Any, model: type[JobFields]
) -> tuple[tuple[tuple[str, str], ...], tuple[Any, ...]]:
    """(column, database type) of every column of a new job row, and the values of the
    columns ``_values`` leaves out (the model's defaults: attempts 0, no lease, ...)."""
    key = (connection.alias, model._meta.db_table)
    cached = _layouts.get(key)
    if cached is not None:
        return cached
    fields: dict[str, Any] = {str(f.column): f for f in model._meta.concrete_fields}
    rest = [c for c in fields if c not in _INSERT_COLUMNS]
    defaults = []
    for c in rest:
        value = fields[c].get_default()
        defaults.append(value.value if isinstance(value, State) else value)
    columns = tuple((c, str(fields[c].db_type(connection))) for c in (*_INSERT_COLUMNS, *rest))
    layout = (columns, tuple(defaults))
    _layouts[key] = layout
    return layout


class LedgerOps(LedgerBase):
    # -- insert ----------------------------------------------------------------------------
    def _one_statement(self, jobs: Sequence[NewJob], events: Sequence[audit.Event]) -> bool:
        """Can this enqueue be a single autocommit INSERT (PostgreSQL, nothing else to write,
        not inside the caller's transaction)? Then it costs one round trip and one commit."""
        return (
            self.is_postgres
            and not self.connection.in_atomic_block
            and not events
            and not any(j.dedupe_key or j.depends_on for j in jobs)
            and not audit.needed(audit.ENQUEUE)
        )

    @staticmethod
    def _values(j: NewJob, now: datetime | None) -> tuple[Any, ...]:
        """A new row's values, in the order of ``_INSERT_COLUMNS``. With ``now`` None (the
        PostgreSQL statement reads the clock), ``available_at`` is the ``run_at`` or None."""
        if now is None:
            available = j.run_at
        else:
            available = j.run_at or (now + timedelta(seconds=j.delay) if j.delay else now)
        return (
            j.job_id,
            j.queue,
            j.name,
            _BLOCKED if j.blocked else _PENDING,
            j.payload.body,
            j.payload.content_type,
            j.payload.content_encoding,
            j.priority,
            available,
            j.max_attempts,
            j.timeout,
            j.classification,
            j.trace_id,
            j.dedupe_key,
            j.flow_id,
            j.parent_id,
            j.flow_key,
            j.flow_phase,
            j.flow_mode,
            j.parent_backend,
            j.flow_depth,
            now,
            now,
        )

    def _insert_rows(
        self, jobs: Sequence[NewJob], now: datetime | None, notify: Sequence[str] = ()
    ) -> set[str]:
        """Insert ``jobs`` (conflicting ones are skipped); answer the ids inserted.

        PostgreSQL: one ``INSERT … SELECT FROM unnest(…)`` per batch, which also reads the
        clock and sends the NOTIFYs for ``notify``. SQLite: multi-row ``INSERT … VALUES``
        within its variable limit (in-process wake-ups are the caller's). Either way a handful
        of statements instead of the ORM's per-field preparation of every row.
        """
        columns, defaults = _insert_layout(self.connection, self.model)
        inserted: set[str] = set()
        with self.connection.cursor() as cur:
            if self.is_postgres:
                rows = [(*self._values(j, None), *defaults, j.delay or 0.0) for j in jobs]
                varying, arrays = sql.unnest_params(list(zip(*rows, strict=True)))
                statement = sql.insert_jobs_postgresql(columns, varying, len(notify), self.table)
                cur.execute(statement, [now, *(a for q in notify for a in (CHANNEL, q)), *arrays])
                inserted.update(r[0] for r in cur.fetchall())
                return inserted
            clock = self._now(now)
            rows = [self._values(j, clock) + defaults for j in jobs]
            names = [c for c, _ in columns]
            a = self._adapt
            datetimes = _datetime_columns(self.model)
            dt = {i for i, (c, _) in enumerate(columns) if c in datetimes}
            per = max(1, self.connection.features.max_query_params // len(names))
            for start in range(0, len(rows), per):
                chunk = rows[start : start + per]
                params: list[Any] = []
                for row in chunk:
                    params += [a(v) if i in dt else v for i, v in enumerate(row)]
                cur.execute(sql.insert_jobs_sqlite(names, len(chunk), self.table), params)
                inserted.update(r[0] for r in cur.fetchall())
        return inserted

    def _insert(
        self, jobs: Sequence[NewJob], now: datetime | None, notify: Sequence[str] = ()
    ) -> tuple[dict[str, EnqueuedJob], set[str]]:
        """Insert ignoring conflicts; a dedupe-key conflict answers the holder of the key.

        Answers the answer per job id, and the ids this call inserted (not a job whose id
        already existed: a re-delivered enqueue, or a re-landed child).
        """
        answer: dict[str, EnqueuedJob] = {}
        todo = list(jobs)
        inserted_all: set[str] = set()
        for _ in range(5):  # the holder may turn terminal between our insert and our look-up
            inserted = self._insert_rows(todo, now, notify)
            inserted_all |= inserted
            notify = ()  # sent with the first statement
            keyed = [j.job_id for j in todo if j.dedupe_key and j.job_id not in inserted]
            # A keyed job not inserted: its key is held, or its id exists (a re-enqueued child).
            present = (
                inserted | set(self.jobs().filter(id__in=keyed).values_list("id", flat=True))
                if keyed
                else inserted
            )
            retry: list[NewJob] = []
            for j in todo:
                if not j.dedupe_key or j.job_id in present:
                    answer[j.job_id] = EnqueuedJob(
                        job_id=j.job_id, queue_name=j.queue, backend=self.alias
                    )
                    continue
                holder = (
                    self.jobs()
                    .filter(queue=j.queue, dedupe_key=j.dedupe_key, state__in=_ACTIVE)
                    .values_list("id", flat=True)
                    .first()
                )
                if holder is None:
                    retry.append(j)
                else:
                    answer[j.job_id] = EnqueuedJob(
                        job_id=holder, queue_name=j.queue, backend=self.alias, deduplicated=True
                    )
            if not retry:
                return answer, inserted_all
            todo = retry
        raise OperationalError("dedupe insert did not settle after 5 tries")

    def _record_enqueue(
        self,
        jobs: Sequence[NewJob],
        answer: dict[str, EnqueuedJob],
        events: Sequence[audit.Event],
        *,
        audited: bool = True,
    ) -> None:
        """The rest of an enqueue's transaction: DAG edges of the jobs inserted (not those
        deduplicated away) and, if ``audited``, the audit rows (``_audit_enqueue``)."""
        inserted = [j for j in jobs if not answer[j.job_id].deduplicated]
        edges = [
            FlowDependency(
                flow_id=j.flow_id or "",
                kind=FlowDependency.KIND_DAG,
                job_id=j.job_id,
                depends_on_id=dep,
            )
            for j in inserted
            for dep in j.depends_on
        ]
        if edges:
            FlowDependency.objects.using(self.db).bulk_create(edges, ignore_conflicts=True)
            # Jobs of one flow may arrive in several batches (the outbox relay pages): a
            # dependency that already finished releases a dependant stored after it.
            finished = list(
                self.jobs()
                .filter(id__in={e.depends_on_id for e in edges}, state="done")
                .values_list("id", flat=True)
            )
            if finished:
                self.release_dependants(finished, self._now(None))
        if audited:
            self._audit_enqueue(inserted, events)

    def _audit_enqueue(self, inserted: Sequence[NewJob], events: Sequence[audit.Event]) -> None:
        evs = list(events)
        if audit.needed(audit.ENQUEUE):
            evs += [
                audit.Event(
                    action=audit.ENQUEUE,
                    job_id=j.job_id,
                    queue=j.queue,
                    backend=self.alias,
                    data={"name": j.name},
                )
                for j in inserted
            ]
        audit.record(evs, using=self.db)

    # -- leases ----------------------------------------------------------------------------
    def extend_lease(
        self, job_id: str, token: str, seconds: float, now: datetime | None = None
    ) -> bool:
        with transaction.atomic(using=self.db):
            until = self._now(now) + timedelta(seconds=seconds)
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
        with transaction.atomic(using=self.db):
            held = self.jobs().filter(id=job_id, lease_token=token, state=State.INFLIGHT)
            changed = bool(held.update(**fields))
            if changed and audit.needed(action):
                event = audit.Event(action=action, job_id=job_id, backend=self.alias, data=data)
                audit.record([event], using=self.db)
        return changed

    def renew_leases(
        self, leases: Sequence[tuple[str, str]], seconds: float, now: datetime | None = None
    ) -> frozenset[str]:
        if not leases:
            return frozenset()
        renewed = {r[0] for r in self._renew(leases, seconds, now)}
        return frozenset(j for j, _ in leases if j not in renewed)

    def _renew(
        self,
        leases: Sequence[tuple[str, str]],
        seconds: float,
        now: datetime | None,
        returning: str = "id",
    ) -> list[tuple[Any, ...]]:
        """Renew the held leases among ``leases`` (one statement per 500); answer
        ``returning`` of each renewed row."""
        renewed: list[tuple[Any, ...]] = []
        with transaction.atomic(using=self.db):
            t = self._now(now)
            expiry = self._adapt(t + timedelta(seconds=seconds))
            for start in range(0, len(leases), ACK_CHUNK):
                chunk = leases[start : start + ACK_CHUNK]
                params: list[Any] = [expiry, expiry]
                for job_id, token in chunk:
                    params += [job_id, token]
                statement = sql.renew_many(
                    self.connection.vendor, len(chunk), self.table, returning
                )
                with self.connection.cursor() as cur:
                    cur.execute(statement, params)
                    renewed += [tuple(r) for r in cur.fetchall()]
        return renewed

    def lease_signals(self, leases: Sequence[tuple[str, str]]) -> LeaseSignals:
        if not leases:
            return LeaseSignals()
        held = dict(leases)
        rows = (
            self.jobs()
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

    def set_progress(self, job_id: str, token: str, progress: int) -> bool:
        return self._fenced_update(
            job_id, token, audit.PROGRESS, {"progress": progress}, progress=progress
        )

    def _rescue_rows(
        self, rows: Sequence[tuple[Any, ...]], t: datetime, max_stalled: int
    ) -> dict[State, list[tuple[Any, ...]]]:
        """Apply the rescue of expired leases, inside the caller's transaction.

        ``rows``: (id, attempts, max_attempts, stalls, cancel_requested, queue) of inflight
        rows whose lease expired before ``t``. ``core.lifecycle.rescue`` decides each: back
        to pending (stall + 1), or failed as stalled; a cancel request makes it cancelled.
        Each UPDATE is fenced by (inflight, expired), so a row renewed meanwhile is left
        alone. Answers the rows by the state they were sent to.
        """

        groups: dict[State, list[tuple[Any, ...]]] = {s: [] for s in State}
        for row in rows:
            _job_id, attempts, max_attempts, stalls, cancel_requested, _q = row
            to = (
                State.CANCELLED
                if cancel_requested
                else rescue(
                    attempts=attempts,
                    max_attempts=max_attempts,
                    stalls=stalls + 1,
                    max_stalled=max_stalled,
                )
            )
            groups[to].append(row)
        fence = {"state": State.INFLIGHT, "lease_expires_at__lt": t}
        common = {
            "stalls": F("stalls") + 1,
            "lease_token": None,
            "lease_expires_at": None,
            "updated_at": t,
        }
        msg = "the lease expired before the worker acked (worker crashed or stalled)"
        if groups[State.PENDING]:
            self.jobs().filter(id__in=[r[0] for r in groups[State.PENDING]], **fence).update(
                state=State.PENDING, available_at=t, error=msg, reason="stalled", **common
            )
        if groups[State.FAILED]:
            self.jobs().filter(id__in=[r[0] for r in groups[State.FAILED]], **fence).update(
                state=State.FAILED, finished_at=t, error=msg, reason="stalled", **common
            )
            self.report_terminal([r[0] for r in groups[State.FAILED]])
        if groups[State.CANCELLED]:
            ids = [r[0] for r in groups[State.CANCELLED]]
            self.jobs().filter(id__in=ids, **fence).update(
                state=State.CANCELLED, finished_at=t, reason="cancelled", **common
            )
            self.report_terminal(ids)
            self.cascade_cancel(ids, t)
        self._notify([r[5] for r in groups[State.PENDING]])
        events = [
            audit.Event(
                action=audit.STALLED,
                job_id=r[0],
                queue=r[5],
                backend=self.alias,
                attempt=r[1],
                data={"to": to.value, "stalls": r[3] + 1},
            )
            for to, grp in groups.items()
            for r in grp
        ] + [
            audit.Event(
                action=audit.DLQ_WRITE,
                job_id=r[0],
                queue=r[5],
                backend=self.alias,
                attempt=r[1],
                data={"reason": "stalled", "error": msg},
            )
            for r in groups[State.FAILED]
        ]
        audit.record(events, using=self.db)
        return groups
