"""Unique jobs in the job table (the local backend, the SQS ledger): one upsert per batch.

The holder of a key is the one row whose ``unique_key`` is the key and whose
``unique_states`` is set: a partial unique index (``bq_job_unique``, ``bq_sqs_unique``) allows
no second one, whatever runs concurrently, in any transaction. An enqueue is one
``INSERT … ON CONFLICT (unique_key) WHERE unique_states IS NOT NULL DO UPDATE … WHERE
<the holder holds> RETURNING``: a free key stores the job; a held one updates the holder
(counts the call; for replace and debounce, its payload and start while it waits) and answers
it. The index waits for a holder's uncommitted transaction, so a rolled-back enqueue frees
its key and a committed one is seen. A holder that no longer holds (rule: unique,
``core.unique.holds``) is left alone by the upsert: its claim is cleared (``unique_states``
NULL, in a statement that checks again that it does not hold) and the job stored on the next
round. Payload bytes never travel twice: a batch's calls of one key are folded first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from django.db import OperationalError

from django_blamequeue import audit
from django_blamequeue.backends.jobtable import sql
from django_blamequeue.backends.jobtable.table import CHANNEL, JobTable
from django_blamequeue.core import unique
from django_blamequeue.core.records import EnqueuedJob, NewJob

#: The columns a unique job sets beyond a plain one's (``inserts._INSERT_COLUMNS``).
UNIQUE_COLUMNS = ("unique_key", "unique_states", "unique_calls", "unique_until")
_ROUNDS = 5


@dataclass(slots=True)
class _Call:
    """One key's calls in a batch, folded: the first job is stored (with the last payload
    for replace and debounce); the others are its absorbed ``calls``."""

    job: NewJob
    calls: list[NewJob]


def fold(jobs: Sequence[NewJob]) -> list[_Call]:
    """A batch's jobs by key, in order (the upsert may touch one row once per statement)."""
    by_key: dict[str, _Call] = {}
    for j in jobs:
        assert j.unique_key is not None
        call = by_key.get(j.unique_key)
        if call is None:
            by_key[j.unique_key] = _Call(j, [])
            continue
        if j.unique_mode == unique.REJECT:
            raise unique.duplicate(j.unique_key, call.job.job_id, "pending", "in this batch")
        call.calls.append(j)
        if j.unique_mode in (unique.REPLACE, unique.DEBOUNCE):
            call.job = replace(call.job, payload=j.payload, delay=j.delay, run_at=j.run_at)
    return list(by_key.values())


def conflict_events(
    answers: Sequence[EnqueuedJob], jobs: Sequence[NewJob], alias: str
) -> list[audit.Event]:
    """``system.queue.unique`` per absorbed call (skip, replace, debounce), when wanted."""
    if not audit.needed(audit.UNIQUE):
        return []
    return [
        audit.Event(
            action=audit.UNIQUE,
            job_id=a.job_id,
            queue=a.queue_name,
            backend=alias,
            data={"outcome": a.conflict, "key": j.unique_key, "name": j.name},
        )
        for a, j in zip(answers, jobs, strict=True)
        if a.conflict is not None
    ]


class Uniques:
    """The unique jobs of a job table: the upsert and the take-over of stale holders."""

    def __init__(self, table: JobTable) -> None:
        self.table = table

    def insert(
        self,
        jobs: Sequence[NewJob],
        now: datetime | None,
        layout: tuple[tuple[tuple[str, str], ...], tuple[Any, ...]],
        values: Any,
        notify: Sequence[str] = (),
    ) -> tuple[dict[str, EnqueuedJob], set[str]]:
        """Store the unique ``jobs`` (all with a ``unique_key``) or settle their conflicts;
        answers per job id, and the ids stored. ``DUPLICATE`` for a ``reject`` conflict:
        raised before this call wrote anything but absorbed calls' counts, which the caller's
        transaction rolls back. ``layout`` and ``values``: the plain insert's (inserts.py)."""
        answer: dict[str, EnqueuedJob] = {}
        inserted: set[str] = set()
        todo = fold(jobs)
        alias = self.table.alias
        for _ in range(_ROUNDS):
            returned = self._upsert(todo, now, layout, values, notify)
            notify = ()
            missing: list[_Call] = []
            for call in todo:
                j = call.job
                row = returned.get(j.unique_key or "")
                if row is None:
                    missing.append(call)
                    continue
                holder, state = row
                if holder == j.job_id:
                    inserted.add(holder)
                    answer[j.job_id] = EnqueuedJob(job_id=holder, queue_name=j.queue, backend=alias)
                    absorbed(answer, call.calls, holder, alias, acted=True)
                    continue
                if j.unique_mode == unique.REJECT:
                    raise unique.duplicate(j.unique_key or "", holder, state)
                acted = state in ("pending", "blocked")
                absorbed(answer, [j, *call.calls], holder, alias, acted=acted)
            if not missing:
                return answer, inserted
            todo = self._take_over(missing, now, answer)
            if not todo:
                return answer, inserted
        raise OperationalError("unique insert did not settle after 5 rounds")

    def _take_over(
        self, missing: list[_Call], now: datetime | None, answer: dict[str, EnqueuedJob]
    ) -> list[_Call]:
        """Calls the upsert stored nothing for: a job whose id exists already (a relay that
        delivers twice) is answered as it is; for the others the holder no longer holds, its
        claim is cleared here (checked again in the statement). Answers the calls to retry."""
        ids = [c.job.job_id for c in missing]
        existing = set(self.table.jobs().filter(id__in=ids).values_list("id", flat=True))
        retry = []
        for call in missing:
            j = call.job
            if j.job_id in existing:
                answer[j.job_id] = EnqueuedJob(
                    job_id=j.job_id, queue_name=j.queue, backend=self.table.alias
                )
                for c in call.calls:
                    answer[c.job_id] = answer[j.job_id]
            else:
                retry.append(call)
        if retry:
            self._clear_stale([c.job.unique_key or "" for c in retry], now)
        return retry

    def _clear_stale(self, keys: Sequence[str], now: datetime | None) -> None:
        """rule: unique — the claim of each key's holder that no longer holds is cleared."""
        t = self.table
        params: list[Any]
        if t.is_postgres:
            where, params = "unique_key = ANY(%s::varchar[])", [list(keys), now]
            holds = _holds("", "COALESCE(%s::timestamptz, statement_timestamp())", "strpos")
        else:
            where = f"unique_key IN ({sql.placeholders(keys)})"
            params = [*keys, t.adapt(t.clock(now))]
            holds = _holds("", "%s", "instr")
        with t.connection.cursor() as cur:
            cur.execute(
                f"UPDATE {t.name} SET unique_states = NULL WHERE {where} "
                f"AND unique_states IS NOT NULL AND NOT ({holds})",
                params,
            )

    def _upsert(
        self,
        calls: Sequence[_Call],
        now: datetime | None,
        layout: tuple[tuple[tuple[str, str], ...], tuple[Any, ...]],
        values: Any,
        notify: Sequence[str],
    ) -> dict[str, tuple[str, str]]:
        """One upsert of the folded calls (all of one mode: one enqueue's); answers
        ``key → (the id of the job that holds it, its state)`` for the rows it stored or
        updated (a stale holder's key is absent)."""
        t = self.table
        columns, defaults = layout
        mode = calls[0].job.unique_mode or unique.SKIP
        if t.is_postgres:
            rows = [
                (*values(c.job, None), *_unique_values(c, None), *defaults, *_seconds(c.job))
                for c in calls
            ]
            varying, arrays = sql.unnest_params(list(zip(*rows, strict=True)))
            statement = upsert_postgresql(columns, varying, len(notify), t.name, mode)
            head = [now, *(a for q in notify for a in (CHANNEL, q))]
            found = t.fetch(statement, [*head, *arrays])
            return {key: (job_id, state) for job_id, key, state in found}
        clock = t.clock(now)
        a = t.adapt
        names = [c for c, _ in columns]
        answer: dict[str, tuple[str, str]] = {}
        with t.connection.cursor() as cur:
            for call in calls:  # SQLite: one row a statement (its upsert's WHERE is per row)
                row = [*values(call.job, clock), *_unique_values(call, clock), *defaults]
                params = [a(v) if isinstance(v, datetime) else v for v in row]
                cur.execute(upsert_sqlite(tuple(names), t.name, mode), params)
                for job_id, key, state in cur.fetchall():
                    answer[key] = (job_id, state)
        return answer


def absorbed(
    answer: dict[str, EnqueuedJob],
    calls: Sequence[NewJob],
    holder: str,
    alias: str,
    *,
    acted: bool,
) -> None:
    """Answer the calls ``holder`` absorbed with what they did to it (``conflict``):
    replace and debounce act only on a holder that waits (``acted``); else they skip."""
    for c in calls:
        mode = c.unique_mode
        outcome = mode if mode in (unique.REPLACE, unique.DEBOUNCE) and acted else unique.SKIP
        answer[c.job_id] = EnqueuedJob(
            job_id=holder, queue_name=c.queue, backend=alias, deduplicated=True, conflict=outcome
        )


def _unique_values(call: _Call, clock: datetime | None) -> tuple[Any, ...]:
    """``UNIQUE_COLUMNS``' values; with no ``clock`` (PostgreSQL) the window's end is
    computed by the statement from its last column."""
    j = call.job
    until = None
    if clock is not None and j.unique_window is not None:
        until = clock + timedelta(seconds=j.unique_window)
    return (j.unique_key, j.unique_states, len(call.calls), until)


def _seconds(j: NewJob) -> tuple[float, float | None]:
    return (float(j.delay or 0.0), j.unique_window)


# -- the statements --------------------------------------------------------------------------
def _holds(row: str, now: str, find: str) -> str:
    """rule: unique (``core.unique.holds``) in SQL: the row's state is among its states
    (``find``: PostgreSQL's ``strpos``, SQLite's ``instr``) and its window has not ended."""
    return (
        f"{find}({row}unique_states, ',' || {row}state || ',') > 0 AND "
        f"({row}unique_until IS NULL OR {row}unique_until > {now})"
    )


_REPLACED = ("payload", "content_type", "content_encoding")


def _sets(table: str, mode: str) -> list[str]:
    """What a held key's enqueue does to its holder: count the call (its folded calls too);
    replace and debounce take the new payload (and start) while the holder waits."""
    if mode == unique.REJECT:
        return [f"unique_calls = {table}.unique_calls"]  # touched only to answer the holder
    sets = [
        f"unique_calls = {table}.unique_calls + EXCLUDED.unique_calls + 1",
        "updated_at = EXCLUDED.updated_at",
    ]
    waiting = f"{table}.state IN ('pending', 'blocked')"
    replaced = list(_REPLACED) + (["available_at"] if mode == unique.DEBOUNCE else [])
    if mode in (unique.REPLACE, unique.DEBOUNCE):
        sets += [
            f"{c} = CASE WHEN {waiting} THEN EXCLUDED.{c} ELSE {table}.{c} END" for c in replaced
        ]
    return sets


@cache
def upsert_postgresql(
    columns: Sequence[tuple[str, str]],
    varying: Sequence[bool | str],
    notifies: int,
    table: str,
    mode: str,
) -> str:
    """The batch upsert (rule: unique): as ``sql.insert_jobs_postgresql`` (the clock, the
    NOTIFYs, rows unnested), the window's end made from the clock and a last column
    ``bq_window``; a job whose id exists is left out (a relay's second delivery)."""
    names = [c for c, _ in columns]
    rows = sql.unnest_rows(
        [*names, "bq_delay", "bq_window"],
        [*(t for _, t in columns), "float8", "float8"],
        varying,
    )
    picked = []
    for name in names:
        if name in ("created_at", "updated_at"):
            picked.append("t.now")
        elif name == "available_at":
            picked.append("COALESCE(v.available_at, t.now + make_interval(secs => v.bq_delay))")
        elif name == "unique_until":
            picked.append(
                "CASE WHEN v.bq_window IS NULL THEN NULL "
                "ELSE t.now + make_interval(secs => v.bq_window) END"
            )
        else:
            picked.append(f"v.{name}")
    clock = "SELECT COALESCE(%s::timestamptz, statement_timestamp()) AS now"
    clock += "".join(f", pg_notify(%s, %s) AS n{i}" for i in range(notifies))
    holds = _holds(f"{table}.", "EXCLUDED.created_at", "strpos")
    return (
        f"INSERT INTO {table} ({', '.join(names)}) "
        f"SELECT {', '.join(picked)} FROM ({clock}) AS t CROSS JOIN {rows} AS v "
        f"WHERE NOT EXISTS (SELECT 1 FROM {table} e WHERE e.id = v.id) "
        "ON CONFLICT (unique_key) WHERE unique_states IS NOT NULL "
        f"DO UPDATE SET {', '.join(_sets(table, mode))} WHERE {holds} "
        "RETURNING id, unique_key, state"
    )


@cache
def upsert_sqlite(names: tuple[str, ...], table: str, mode: str) -> str:
    """One job's upsert on SQLite (rule: unique), times as stored text."""
    holds = _holds(f"{table}.", "excluded.created_at", "instr")
    sets = [s.replace("EXCLUDED.", "excluded.") for s in _sets(table, mode)]
    row = ", ".join(["%s"] * len(names))
    return (
        f"INSERT INTO {table} ({', '.join(names)}) SELECT * FROM (VALUES ({row})) AS v "
        f"WHERE NOT EXISTS (SELECT 1 FROM {table} e WHERE e.id = v.column1) "
        "ON CONFLICT (unique_key) WHERE unique_states IS NOT NULL "
        f"DO UPDATE SET {', '.join(sets)} WHERE {holds} "
        "RETURNING id, unique_key, state"
    )
