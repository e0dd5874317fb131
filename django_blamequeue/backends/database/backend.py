"""The local backend's verbs. Each is one short transaction on the configured database.

Enqueue joins the caller's transaction (``atomic(savepoint=False)``), so a job enqueued inside
``transaction.atomic()`` is a row of that transaction and rolls back with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import OperationalError, transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest

from ... import audit, wakeup
from ...core.states import ACTIVE, TERMINAL, WAITING, State
from ...models import FlowDependency, Job
from ...records import (
    Ack,
    AckResult,
    Claimed,
    EnqueuedJob,
    JobInfo,
    LeaseSignals,
    NewJob,
    PruneReport,
    QueueStats,
    RescueReport,
)
from . import sql
from .children import ChildOps
from .flows import FlowOps
from .rows import claimed_from_row, info_from_model, to_dt

CHANNEL = "blamequeue"
ACK_CHUNK = 500
_ACTIVE = [s.value for s in ACTIVE]
_TERMINAL_VALUES = frozenset(s.value for s in TERMINAL)


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
_DATETIME_COLUMNS = frozenset(
    f.column for f in Job._meta.concrete_fields if f.get_internal_type() == "DateTimeField"
)
_layouts: dict[str, tuple[tuple[tuple[str, str], ...], tuple[Any, ...]]] = {}


def _insert_layout(connection: Any) -> tuple[tuple[tuple[str, str], ...], tuple[Any, ...]]:
    """(column, database type) of every column of a new job row, and the values of the
    columns ``_values`` leaves out (the model's defaults: attempts 0, no lease, ...)."""
    cached = _layouts.get(connection.alias)
    if cached is not None:
        return cached
    fields: dict[str, Any] = {str(f.column): f for f in Job._meta.concrete_fields}
    rest = [c for c in fields if c not in _INSERT_COLUMNS]
    defaults = []
    for c in rest:
        value = fields[c].get_default()
        defaults.append(value.value if isinstance(value, State) else value)
    columns = tuple((c, str(fields[c].db_type(connection))) for c in (*_INSERT_COLUMNS, *rest))
    layout = (columns, tuple(defaults))
    _layouts[connection.alias] = layout
    return layout


def _ack_row_pg(a: Ack) -> tuple[Any, ...]:
    """One row of ``sql.ack_many_postgresql``: column 8 is the retry delay, 9 unused (the
    statement reads the clock)."""
    t = a.transition
    return (
        a.job_id,
        a.token,
        t.state.value,
        t.result.body if t.result else None,
        t.error,
        t.traceback,
        t.reason.value if t.reason else None,
        t.delay if t.state == State.PENDING else None,
        None,
        int(t.give_back_attempt),
        int(t.yields_to_cancel),
        int(t.state == State.DONE),
    )


class DatabaseBackend(ChildOps, FlowOps):
    """The local backend: SQLite or PostgreSQL, through Django's own connections."""

    supports_flows = True

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
        if self._one_statement(jobs, events):
            self._insert_rows(jobs, now, wake)  # autocommit: the INSERT is the transaction
            wakeup.notify(wake)
            return [
                EnqueuedJob(job_id=j.job_id, queue_name=j.queue, backend=self.alias) for j in jobs
            ]
        with transaction.atomic(using=self.db, savepoint=False):
            answer = self._insert(jobs, now, wake)
            transaction.on_commit(lambda: wakeup.notify(wake), using=self.db)
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
        return [answer[j.job_id] for j in jobs]

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
        columns, defaults = _insert_layout(self.connection)
        inserted: set[str] = set()
        with self.connection.cursor() as cur:
            if self.is_postgres:
                rows = [(*self._values(j, None), *defaults, j.delay or 0.0) for j in jobs]
                varying, arrays = sql.unnest_params(list(zip(*rows, strict=True)))
                statement = sql.insert_jobs_postgresql(columns, varying, len(notify))
                cur.execute(statement, [now, *(a for q in notify for a in (CHANNEL, q)), *arrays])
                inserted.update(r[0] for r in cur.fetchall())
                return inserted
            clock = self._now(now)
            rows = [self._values(j, clock) + defaults for j in jobs]
            names = [c for c, _ in columns]
            a = self._adapt
            dt = {i for i, (c, _) in enumerate(columns) if c in _DATETIME_COLUMNS}
            per = max(1, self.connection.features.max_query_params // len(names))
            for start in range(0, len(rows), per):
                chunk = rows[start : start + per]
                params: list[Any] = []
                for row in chunk:
                    params += [a(v) if i in dt else v for i, v in enumerate(row)]
                cur.execute(sql.insert_jobs_sqlite(names, len(chunk)), params)
                inserted.update(r[0] for r in cur.fetchall())
        return inserted

    def _insert(
        self, jobs: Sequence[NewJob], now: datetime | None, notify: Sequence[str] = ()
    ) -> dict[str, EnqueuedJob]:
        """Insert ignoring conflicts; a dedupe-key conflict answers the holder of the key."""
        answer: dict[str, EnqueuedJob] = {}
        todo = list(jobs)
        for _ in range(5):  # the holder may turn terminal between our insert and our look-up
            inserted = self._insert_rows(todo, now, notify)
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
                return answer
            todo = retry
        raise OperationalError("dedupe insert did not settle after 5 tries")

    # -- leasing ---------------------------------------------------------------------------
    def claim(
        self, queues: Sequence[str], limit: int, lease_s: float, now: datetime | None = None
    ) -> list[Claimed]:
        if limit <= 0 or not queues:
            return []
        with transaction.atomic(using=self.db):
            return self._claim(queues, limit, lease_s, now)

    def apply_and_claim(
        self,
        acks: Sequence[Ack],
        queues: Sequence[str],
        limit: int,
        lease_s: float,
        now: datetime | None = None,
    ) -> tuple[list[AckResult], list[Claimed]]:
        """``apply_many`` then ``claim``, in one transaction: one commit (one WAL flush) per
        worker round instead of two. Both or neither: after an error the acks are re-sent
        (the fence makes that safe) and nothing was leased."""
        if not acks and (limit <= 0 or not queues):
            return [], []
        with transaction.atomic(using=self.db):
            results = self._apply(acks, now) if acks else []
            claimed = self._claim(queues, limit, lease_s, now) if limit > 0 and queues else []
        return results, claimed

    def _claim(
        self, queues: Sequence[str], limit: int, lease_s: float, now: datetime | None
    ) -> list[Claimed]:
        """The claim, inside the caller's transaction."""
        qs = list(queues)
        with self.connection.cursor() as cur:
            if self.is_postgres:
                cur.execute(sql.claim_postgresql(), [qs, now, limit, limit, now, lease_s, now, now])
            else:
                t = self._now(now)
                expires = t + timedelta(seconds=lease_s)
                a = self._adapt
                cur.execute(sql.claim_sqlite(len(qs)), [a(expires), a(t), a(t), *qs, a(t), limit])
            rows = cur.fetchall()
            claimed = [claimed_from_row(r) for r in rows]
            claimed.sort(
                key=lambda c: (-c.priority, c.available_at or c.lease_expires_at, c.job_id)
            )
            if claimed and audit.needed(audit.CONSUME_START):
                audit.record(
                    [
                        audit.Event(
                            action=audit.CONSUME_START,
                            job_id=c.job_id,
                            queue=c.queue,
                            backend=self.alias,
                            attempt=c.attempt,
                            data={"name": c.name},
                        )
                        for c in claimed
                    ],
                    using=self.db,
                )
        return claimed

    def apply_many(self, acks: Sequence[Ack], now: datetime | None = None) -> list[AckResult]:
        if not acks:
            return []
        with transaction.atomic(using=self.db):
            return self._apply(acks, now)

    def _apply(self, acks: Sequence[Ack], now: datetime | None) -> list[AckResult]:
        """The acks, inside the caller's transaction."""
        applied: dict[str, tuple[Any, ...]] = {}
        fan_outs = [a for a in acks if a.transition.state == State.WAITING_CHILDREN]
        plain = [a for a in acks if a.transition.state != State.WAITING_CHILDREN]
        if fan_outs or not self.is_postgres:
            now = self._now(now)  # PostgreSQL's plain acks read the clock in the statement
        fanned: dict[str, State | None] = {}
        if fan_outs:
            clock = self._now(now)
            fanned = {a.job_id: self.apply_fan_out(a, clock) for a in fan_outs}
        for start in range(0, len(plain), ACK_CHUNK):
            chunk = plain[start : start + ACK_CHUNK]
            with self.connection.cursor() as cur:
                if self.is_postgres:
                    varying, params = sql.unnest_params(
                        list(zip(*map(_ack_row_pg, chunk), strict=False))
                    )
                    cur.execute(sql.ack_many_postgresql(varying), [*params, now])
                else:
                    assert now is not None
                    stamp = self._adapt(now)
                    params = [p for a in chunk for p in self._ack_params(a, now, stamp)]
                    cur.execute(sql.ack_many(self.connection.vendor, len(chunk)), params)
                for row in cur.fetchall():
                    applied[row[0]] = tuple(row)
        self._after_acks(plain, applied, now)
        answer = []
        for a in acks:
            if a.job_id in fanned:
                state = fanned[a.job_id]
                answer.append(AckResult(job_id=a.job_id, ok=state is not None, state=state))
            else:
                row = applied.get(a.job_id)
                answer.append(
                    AckResult(
                        job_id=a.job_id, ok=row is not None, state=State(row[1]) if row else None
                    )
                )
        return answer

    def _ack_params(self, a: Ack, now: datetime, stamp: Any) -> list[Any]:
        """One row of ``sql.ack_many``; ``stamp`` is ``now`` adapted for the driver."""
        t = a.transition
        available = now + timedelta(seconds=t.delay) if t.state == State.PENDING else None
        return [
            a.job_id,
            a.token,
            t.state.value,
            t.result.body if t.result else None,
            t.error,
            t.traceback,
            t.reason.value if t.reason else None,
            self._adapt(available) if available is not None else None,
            stamp,
            int(t.give_back_attempt),
            int(t.yields_to_cancel),
            int(t.state == State.DONE),
        ]

    def _after_acks(
        self, acks: Sequence[Ack], applied: dict[str, tuple[Any, ...]], now: datetime | None
    ) -> None:
        """Same transaction as the acks: release DAG dependants, cascade cancels, audit."""
        # DAG nodes (a flow id, no parent) may have dependants; @flow children never do.
        done_in_flows = [r[0] for r in applied.values() if r[1] == State.DONE and r[3] and not r[4]]
        cancelled = [r[0] for r in applied.values() if r[1] == State.CANCELLED]
        if done_in_flows or cancelled:
            clock = self._now(now)
            if done_in_flows:
                self.release_dependants(done_in_flows, clock)
            if cancelled:
                self.cascade_cancel(cancelled, clock)
        children = [r[0] for r in applied.values() if r[4] and r[1] in _TERMINAL_VALUES]
        if children:
            self.report_terminal(children)
        self._notify(
            [
                r[2]
                for a in acks
                if (r := applied.get(a.job_id))
                and r[1] == State.PENDING
                and a.transition.delay == 0
            ]
        )
        success = audit.needed(audit.CONSUME_SUCCESS)
        events = [ev for a in acks for ev in self._ack_events(a, applied.get(a.job_id), success)]
        audit.record(events, using=self.db)

    def _ack_events(
        self, a: Ack, row: tuple[Any, ...] | None, success: bool = True
    ) -> list[audit.Event]:
        """The audit events of one ack; ``success``: is a done ack's event wanted at all."""
        if row is None:
            return [
                audit.Event(
                    action=audit.LOCK_LOST,
                    job_id=a.job_id,
                    backend=self.alias,
                    data={"wanted": a.transition.state.value},
                )
            ]
        _, state, queue, _flow, _parent, attempts, name = row
        t = a.transition
        base: dict[str, Any] = {
            "job_id": a.job_id,
            "queue": queue,
            "backend": self.alias,
            "attempt": attempts,
        }
        if state == State.DONE:
            if not success:
                return []
            return [audit.Event(action=audit.CONSUME_SUCCESS, data={"name": name}, **base)]
        if state == State.CANCELLED:
            return [
                audit.Event(action=audit.CANCEL, data={"name": name, "while": "running"}, **base)
            ]
        if state == State.PENDING and t.give_back_attempt:
            return [audit.Event(action=audit.RELEASE, data={"name": name}, **base)]
        data = {"name": name, "error": t.error, "reason": t.reason.value if t.reason else None}
        events = [
            audit.Event(
                action=audit.CONSUME_FAILURE,
                data={**data, "retry_in": t.delay} if state == State.PENDING else data,
                **base,
            )
        ]
        if state == State.FAILED:
            events.append(audit.Event(action=audit.DLQ_WRITE, data=data, **base))
        return events

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
        renewed: set[str] = set()
        with transaction.atomic(using=self.db):
            t = self._now(now)
            expiry = self._adapt(t + timedelta(seconds=seconds))
            for start in range(0, len(leases), ACK_CHUNK):
                chunk = leases[start : start + ACK_CHUNK]
                params: list[Any] = [expiry, expiry]
                for job_id, token in chunk:
                    params += [job_id, token]
                with self.connection.cursor() as cur:
                    cur.execute(sql.renew_many(self.connection.vendor, len(chunk)), params)
                    renewed.update(r[0] for r in cur.fetchall())
        return frozenset(j for j, _ in leases if j not in renewed)

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

    def rescue_expired(
        self, now: datetime | None = None, limit: int = 1000, *, max_stalled: int = 1
    ) -> RescueReport:
        from ...core.lifecycle import rescue

        with transaction.atomic(using=self.db):
            t = self._now(now)
            qs = self.jobs().filter(state=State.INFLIGHT, lease_expires_at__lt=t)
            qs = qs.order_by("lease_expires_at")
            if self.is_postgres:
                qs = qs.select_for_update(skip_locked=True)
            rows = list(
                qs.values_list(
                    "id", "attempts", "max_attempts", "stalls", "cancel_requested", "queue"
                )[:limit]
            )
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
        return RescueReport(
            repended=len(groups[State.PENDING]),
            failed=len(groups[State.FAILED]),
            cancelled=len(groups[State.CANCELLED]),
        )

    # -- operations ------------------------------------------------------------------------
    def purge(self, queue: str) -> int:
        with transaction.atomic(using=self.db):
            ids = list(
                self.jobs()
                .filter(queue=queue, state__in=[s.value for s in WAITING])
                .values_list("id", flat=True)
            )
            for start in range(0, len(ids), 5000):
                chunk = ids[start : start + 5000]
                FlowDependency.objects.using(self.db).filter(job_id__in=chunk).delete()
                self.jobs().filter(id__in=chunk, state__in=[s.value for s in WAITING]).delete()
            audit.record(
                [
                    audit.Event(
                        action=audit.PURGE,
                        queue=queue,
                        backend=self.alias,
                        data={"count": len(ids)},
                    )
                ],
                using=self.db,
            )
        return len(ids)

    def get(self, job_id: str) -> JobInfo | None:
        job = self.jobs().filter(id=job_id).first()
        if job is None:
            return None
        deps = FlowDependency.objects.using(self.db).filter(job_id=job_id, kind="dag")
        tally = self.children_tally(job_id) if job.flow_phase else None
        return info_from_model(job, self.alias, [d.depends_on_id for d in deps], tally)

    def size(self, queue: str) -> int:
        n: int = self.jobs().filter(queue=queue, state__in=[State.PENDING, State.INFLIGHT]).count()
        return n

    def dlq_list(self, queue: str, limit: int = 100, offset: int = 0) -> list[JobInfo]:
        rows = self.jobs().filter(queue=queue, state=State.FAILED).order_by("id")
        return [info_from_model(j, self.alias) for j in rows[offset : offset + limit]]

    def dlq_size(self, queue: str) -> int:
        n: int = self.jobs().filter(queue=queue, state=State.FAILED).count()
        return n

    def dlq_retry(self, job_id: str, now: datetime | None = None) -> bool:
        return self._dlq_retry(self.jobs().filter(id=job_id), now) == 1

    def dlq_retry_all(self, queue: str, now: datetime | None = None) -> int:
        return self._dlq_retry(self.jobs().filter(queue=queue), now)

    def _dlq_retry(self, qs: Any, now: datetime | None) -> int:
        with transaction.atomic(using=self.db):
            t = self._now(now)
            rows = list(qs.filter(state=State.FAILED).values_list("id", "queue", "dedupe_key"))
            held = self._held_keys([(q, k) for _, q, k in rows if k])
            # A dedupe key now held by a newer live job stays in the DLQ (no duplicate run).
            rows = [r for r in rows if not r[2] or (r[1], r[2]) not in held]
            ids = [r[0] for r in rows]
            n = 0
            for start in range(0, len(ids), 5000):
                n += (
                    self.jobs()
                    .filter(id__in=ids[start : start + 5000], state=State.FAILED)
                    .update(
                        state=State.PENDING,
                        attempts=0,
                        stalls=0,
                        available_at=t,
                        finished_at=None,
                        cancel_requested=False,
                        progress=0,
                        updated_at=t,
                    )
                )
            self._notify([r[1] for r in rows])
            audit.record(
                [
                    audit.Event(action=audit.DLQ_RETRY, job_id=r[0], queue=r[1], backend=self.alias)
                    for r in rows
                ],
                using=self.db,
            )
        return n

    def _held_keys(self, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        held: set[tuple[str, str]] = set()
        for queue, key in set(keys):
            if self.jobs().filter(queue=queue, dedupe_key=key, state__in=_ACTIVE).exists():
                held.add((queue, key))
        return held

    def outstanding(self, queues: Sequence[str]) -> int:
        """Jobs a burst worker should still wait for: pending, in flight, parked parents,
        and unsent outbox rows (flow reports on their way)."""
        from ...models import OutboxEntry

        n: int = (
            self.jobs()
            .filter(
                queue__in=list(queues),
                state__in=[State.PENDING, State.INFLIGHT, State.WAITING_CHILDREN],
            )
            .count()
        )
        return n + OutboxEntry.objects.using(self.db).filter(sent_at__isnull=True).count()

    def stats(self) -> list[QueueStats]:
        from django.db.models import Count, Min

        counts: dict[str, dict[str, int]] = {}
        for queue, state, n in (
            self.jobs().order_by().values_list("queue", "state").annotate(n=Count("id"))
        ):
            counts.setdefault(queue, {s.value: 0 for s in State})[state] = n
        oldest = dict(
            self.jobs()
            .filter(state=State.PENDING)
            .order_by()
            .values_list("queue")
            .annotate(m=Min("available_at"))
            .values_list("queue", "m")
        )
        now = self.now()
        recent: dict[tuple[str, str], int] = {
            (q, s): n
            for q, s, n in self.jobs()
            .filter(state__in=[State.DONE, State.FAILED], finished_at__gte=now - timedelta(hours=1))
            .order_by()
            .values_list("queue", "state")
            .annotate(n=Count("id"))
        }
        return [
            QueueStats(
                backend=self.alias,
                queue=q,
                counts=c,
                oldest_pending_age=max(0.0, (now - oldest[q]).total_seconds())
                if oldest.get(q)
                else None,
                done_last_hour=recent.get((q, State.DONE), 0),
                failed_last_hour=recent.get((q, State.FAILED), 0),
            )
            for q, c in sorted(counts.items())
        ]

    def prune(
        self,
        *,
        done_before: datetime | None,
        cancelled_before: datetime | None,
        failed_before: datetime | None,
        limit: int = 5000,
    ) -> PruneReport:
        total = 0
        for state, before in (
            (State.DONE, done_before),
            (State.CANCELLED, cancelled_before),
            (State.FAILED, failed_before),
        ):
            if before is None:
                continue
            with transaction.atomic(using=self.db):
                ids = list(
                    self.jobs()
                    .filter(state=state, finished_at__lt=before)
                    .order_by()
                    .values_list("id", flat=True)[:limit]
                )
                if ids:
                    deps = FlowDependency.objects.using(self.db)
                    deps.filter(job_id__in=ids).delete()
                    deps.filter(depends_on_id__in=ids, kind="dag").delete()
                    total += self.jobs().filter(id__in=ids, state=state).delete()[0]
        return PruneReport(jobs=total)

    def listener(self, queues: Sequence[str]) -> Any:
        if not self.supports_listen:
            return None
        from .listen import PgListener

        return PgListener(self.db, CHANNEL, queues)


__all__ = ["TERMINAL", "DatabaseBackend", "to_dt"]
