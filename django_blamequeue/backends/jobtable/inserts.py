"""Enqueue into the job table: the insert, with dedupe, DAG edges and the enqueue's audit rows.

On PostgreSQL a plain batch (no dedupe key, no dependency, no audit row) is one autocommit
``INSERT ... SELECT FROM unnest(...)`` that also reads the clock and sends the NOTIFYs; anything
more is one transaction that starts with that same statement.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import OperationalError

from django_blamequeue import audit
from django_blamequeue.backends.jobtable import sql
from django_blamequeue.backends.jobtable.table import CHANNEL, JobTable
from django_blamequeue.backends.jobtable.uniques import UNIQUE_COLUMNS, Uniques, conflict_events
from django_blamequeue.core.records import EnqueuedJob, NewJob
from django_blamequeue.core.states import ACTIVE, State
from django_blamequeue.models import FlowDependency, JobFields

if TYPE_CHECKING:
    from django_blamequeue.backends.jobtable.flows import Flows

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
    "about",
    "origin",
    "concurrency_key",
    "expires_at",
    "created_at",
    "updated_at",
)
_layouts: dict[
    tuple[str, str, tuple[str, ...]], tuple[tuple[tuple[str, str], ...], tuple[Any, ...]]
] = {}


def _datetime_columns(model: type[JobFields]) -> frozenset[str]:
    return frozenset(
        str(f.column)
        for f in model._meta.concrete_fields
        if f.get_internal_type() == "DateTimeField"
    )


def _insert_layout(
    connection: Any, model: type[JobFields], extra: tuple[str, ...] = ()
) -> tuple[tuple[tuple[str, str], ...], tuple[Any, ...]]:
    """(column, database type) of every column of a new job row, and the values of the
    columns ``_values`` (and the ``extra`` ones, given by the caller) leave out (the model's
    defaults: attempts 0, no lease, ...)."""
    key = (connection.alias, model._meta.db_table, extra)
    cached = _layouts.get(key)
    if cached is not None:
        return cached
    fields: dict[str, Any] = {str(f.column): f for f in model._meta.concrete_fields}
    given = (*_INSERT_COLUMNS, *extra)
    rest = [c for c in fields if c not in given]
    defaults = []
    for c in rest:
        value = fields[c].get_default()
        defaults.append(value.value if isinstance(value, State) else value)
    columns = tuple((c, str(fields[c].db_type(connection))) for c in (*given, *rest))
    layout = (columns, tuple(defaults))
    _layouts[key] = layout
    return layout


_last_origin: tuple[object, str | None] = (None, None)


def _origin_json(origin: Any) -> str | None:
    """The origin as JSON text; a batch shares one origin dict, encoded once."""
    global _last_origin
    if origin is None:
        return None
    seen, text = _last_origin
    if seen is not origin:
        text = json.dumps(origin, ensure_ascii=False, separators=(",", ":"))
        _last_origin = (origin, text)
    return text


def _values(j: NewJob, now: datetime | None) -> tuple[Any, ...]:
    """A new row's values, in the order of ``_INSERT_COLUMNS``. With ``now`` None (the
    PostgreSQL statement reads the clock), ``available_at`` is the ``run_at`` or None, and
    ``expires_at`` an absolute expiry or None (``_expires_in`` carries a relative one)."""
    expires: datetime | float | None
    if now is None:
        available = j.run_at
        expires = j.expires if isinstance(j.expires, datetime) else None
    else:
        available = j.run_at or (now + timedelta(seconds=j.delay) if j.delay else now)
        expires = j.expires
        if expires is not None and not isinstance(expires, datetime):
            expires = now + timedelta(seconds=expires)
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
        j.about,
        _origin_json(j.origin),
        j.concurrency_key,
        expires,
        now,
        now,
    )


def _expires_in(j: NewJob) -> float | None:
    """Seconds from the engine's now to a relative expiry (the PostgreSQL insert adds them to
    its clock), else None."""
    return None if j.expires is None or isinstance(j.expires, datetime) else float(j.expires)


class Inserts:
    """New rows of the job table: the insert, its dedupe answers, its DAG edges and audit."""

    def __init__(self, table: JobTable, flows: Flows) -> None:
        self.table = table
        self.flows = flows  # a dependency already done releases a dependant stored after it
        self.uniques = Uniques(table)

    def one_statement(self, jobs: Sequence[NewJob], events: Sequence[audit.Event]) -> bool:
        """Can this enqueue be a single autocommit INSERT (PostgreSQL, nothing else to write,
        not inside the caller's transaction)? Then it costs one round trip and one commit."""
        return (
            self.table.is_postgres
            and not self.table.connection.in_atomic_block
            and not events
            and not any(j.dedupe_key or j.depends_on or j.unique_key for j in jobs)
            and not audit.needed(audit.ENQUEUE)
        )

    def one_upsert(self, jobs: Sequence[NewJob], events: Sequence[audit.Event]) -> bool:
        """Can this enqueue be one unique job's autocommit upsert (as ``one_statement``, and no
        conflict to audit)? Its take-over of a stale holder is a second statement, each whole
        on its own: the index keeps one holder whatever another enqueue does in between."""
        return (
            len(jobs) == 1
            and jobs[0].unique_key is not None
            and not jobs[0].depends_on
            and self.table.is_postgres
            and not self.table.connection.in_atomic_block
            and not events
            and not audit.needed(audit.ENQUEUE)
            and not audit.needed(audit.UNIQUE)
        )

    def insert_rows(
        self, jobs: Sequence[NewJob], now: datetime | None, notify: Sequence[str] = ()
    ) -> set[str]:
        """Insert ``jobs`` (conflicting ones are skipped); answer the ids inserted.

        PostgreSQL: one ``INSERT … SELECT FROM unnest(…)`` per batch, which also reads the
        clock and sends the NOTIFYs for ``notify``. SQLite: multi-row ``INSERT … VALUES``
        within its variable limit (in-process wake-ups are the caller's). Either way a handful
        of statements instead of the ORM's per-field preparation of every row.
        """
        table = self.table
        columns, defaults = _insert_layout(table.connection, table.model)
        inserted: set[str] = set()
        if table.is_postgres:
            rows = [
                (*_values(j, None), *defaults, float(j.delay or 0.0), _expires_in(j)) for j in jobs
            ]
            varying, arrays = sql.unnest_params(list(zip(*rows, strict=True)))
            statement = sql.insert_jobs_postgresql(columns, varying, len(notify), table.name)
            head = [now, *(a for q in notify for a in (CHANNEL, q))]
            inserted.update(r[0] for r in table.fetch(statement, [*head, *arrays]))
            return inserted
        with table.connection.cursor() as cur:
            clock = table.clock(now)
            rows = [_values(j, clock) + defaults for j in jobs]
            names = [c for c, _ in columns]
            a = table.adapt
            datetimes = _datetime_columns(table.model)
            dt = {i for i, (c, _) in enumerate(columns) if c in datetimes}
            per = max(1, table.connection.features.max_query_params // len(names))
            for start in range(0, len(rows), per):
                chunk = rows[start : start + per]
                params: list[Any] = []
                for row in chunk:
                    params += [a(v) if i in dt else v for i, v in enumerate(row)]
                cur.execute(sql.insert_jobs_sqlite(names, len(chunk), table.name), params)
                inserted.update(r[0] for r in cur.fetchall())
        return inserted

    def insert(
        self, jobs: Sequence[NewJob], now: datetime | None, notify: Sequence[str] = ()
    ) -> tuple[dict[str, EnqueuedJob], set[str]]:
        """Insert ignoring conflicts; a dedupe-key conflict answers the holder of the key.

        Answers the answer per job id, and the ids this call inserted (not a job whose id
        already existed: a re-delivered enqueue, or a re-landed child).
        """
        answer: dict[str, EnqueuedJob] = {}
        alias, rows = self.table.alias, self.table.jobs
        todo = [j for j in jobs if not j.unique_key]
        inserted_all: set[str] = set()
        if len(todo) < len(jobs):
            layout = _insert_layout(self.table.connection, self.table.model, UNIQUE_COLUMNS)
            uniques = [j for j in jobs if j.unique_key]
            answer, inserted_all = self.uniques.insert(uniques, now, layout, _values, notify)
            notify = ()
            if not todo:
                return answer, inserted_all
        for _ in range(5):  # the holder may turn terminal between our insert and our look-up
            inserted = self.insert_rows(todo, now, notify)
            inserted_all |= inserted
            notify = ()  # sent with the first statement
            keyed = [j.job_id for j in todo if j.dedupe_key and j.job_id not in inserted]
            # A keyed job not inserted: its key is held, or its id exists (a re-enqueued child).
            present = (
                inserted | set(rows().filter(id__in=keyed).values_list("id", flat=True))
                if keyed
                else inserted
            )
            retry: list[NewJob] = []
            for j in todo:
                if not j.dedupe_key or j.job_id in present:
                    answer[j.job_id] = EnqueuedJob(
                        job_id=j.job_id, queue_name=j.queue, backend=alias
                    )
                    continue
                holder = (
                    rows()
                    .filter(queue=j.queue, dedupe_key=j.dedupe_key, state__in=_ACTIVE)
                    .values_list("id", flat=True)
                    .first()
                )
                if holder is None:
                    retry.append(j)
                else:
                    answer[j.job_id] = EnqueuedJob(
                        job_id=holder, queue_name=j.queue, backend=alias, deduplicated=True
                    )
            if not retry:
                return answer, inserted_all
            todo = retry
        raise OperationalError("dedupe insert did not settle after 5 tries")

    def record_enqueue(
        self,
        jobs: Sequence[NewJob],
        answer: dict[str, EnqueuedJob],
        events: Sequence[audit.Event],
        *,
        audited: bool = True,
    ) -> None:
        """The rest of an enqueue's transaction: DAG edges of the jobs inserted (not those
        deduplicated away) and, if ``audited``, the audit rows (``audit_enqueue``)."""
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
            FlowDependency.objects.using(self.table.db).bulk_create(edges, ignore_conflicts=True)
            # Jobs of one flow may arrive in several batches (the outbox relay pages): a
            # dependency that already finished releases a dependant stored after it.
            finished = list(
                self.table.jobs()
                .filter(id__in={e.depends_on_id for e in edges}, state="done")
                .values_list("id", flat=True)
            )
            if finished:
                self.flows.release_dependants(finished, self.table.clock(None))
        if audited:
            events = [
                *events,
                *conflict_events([answer[j.job_id] for j in jobs], jobs, self.table.alias),
            ]
            self.audit_enqueue(inserted, events)

    def audit_enqueue(self, inserted: Sequence[NewJob], events: Sequence[audit.Event]) -> None:
        evs = list(events)
        if audit.needed(audit.ENQUEUE):
            evs += [
                audit.Event(
                    action=audit.ENQUEUE,
                    job_id=j.job_id,
                    queue=j.queue,
                    backend=self.table.alias,
                    data={"name": j.name},
                )
                for j in inserted
            ]
        audit.record(evs, using=self.table.db)
