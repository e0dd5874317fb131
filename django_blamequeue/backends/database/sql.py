"""The few statements the ORM cannot say well: the claim and the batched acks, per vendor.

PostgreSQL claims with a CTE so ``FOR UPDATE SKIP LOCKED`` locks exactly ``LIMIT`` rows (under
``IN (subquery) LIMIT`` the planner may lock more). SQLite has no row locks: the claim is one
``UPDATE … RETURNING`` inside an IMMEDIATE write transaction, which serialises claimers.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

JOB = "blamequeue_job"
DEP = "blamequeue_flow_dependency"
# Statements that both job tables run take ``table``: the local backend's ``JOB`` (the
# default, so its statements are unchanged) or the SQS ledger's.

CLAIM_COLUMNS = (
    "id, queue, name, payload, content_type, content_encoding, lease_token, attempts, "
    "max_attempts, lease_expires_at, priority, timeout, trace_id, classification, flow_id, "
    "parent_id, available_at, created_at, flow_phase, flow_mode, flow_depth"
)


def claim_postgresql() -> str:
    """Params: queues (a list), now, limit, limit, now, lease_seconds, now, now.

    One ordered index scan per queue (``LATERAL``): ``queue IN (…)`` over several queues
    cannot use the claim index's order and sorts every ready row. Each queue locks at most
    ``limit`` rows; the best ``limit`` of them are claimed, and the other locks end with the
    transaction (with one queue, exactly ``limit`` rows are locked).
    """
    return f"""
WITH picked AS (
    SELECT c.id FROM unnest(%s::varchar[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT id, priority, available_at FROM {JOB}
        WHERE state = 'pending' AND queue = q.name
          AND available_at <= COALESCE(%s, statement_timestamp())
        ORDER BY priority DESC, available_at, id
        LIMIT %s
        FOR UPDATE SKIP LOCKED
    ) AS c
    ORDER BY c.priority DESC, c.available_at, c.id
    LIMIT %s
)
UPDATE {JOB} AS j
SET state = 'inflight',
    attempts = j.attempts + 1,
    lease_token = replace(gen_random_uuid()::text, '-', ''),
    lease_expires_at = COALESCE(%s, statement_timestamp()) + make_interval(secs => %s),
    started_at = COALESCE(%s, statement_timestamp()),
    updated_at = COALESCE(%s, statement_timestamp())
FROM picked WHERE j.id = picked.id
RETURNING {", ".join("j." + c.strip() for c in CLAIM_COLUMNS.split(","))}
"""


def unnest_rows(names: Sequence[str], db_types: Sequence[str], varying: Sequence[bool]) -> str:
    """A batch of rows as one row source of constant size (PostgreSQL): one array parameter
    per column whose value varies across the batch, unnested, and one scalar parameter per
    column that is the same in every row. Params: the scalars, then the arrays, each in
    column order. The statement text depends on the column types only, not on the batch
    size, and the driver converts a handful of parameters instead of rows × columns."""
    select, arrays, aliases = [], [], []
    for i, (name, db_type, varies) in enumerate(zip(names, db_types, varying, strict=True)):
        if varies:
            arrays.append(f"%s::{db_type}[]")
            aliases.append(f"c{i}")
            select.append(f"u.c{i} AS {name}")
        else:
            select.append(f"%s::{db_type} AS {name}")
    return (
        f"(SELECT {', '.join(select)} FROM unnest({', '.join(arrays)}) AS u({', '.join(aliases)}))"
    )


def unnest_params(columns: Sequence[tuple[Any, ...]]) -> tuple[list[bool], list[Any]]:
    """``varying`` and the params of :func:`unnest_rows` for column-wise values."""
    varying = [col.count(col[0]) != len(col) for col in columns]
    varying[0] = True  # at least one array: it sets the number of rows
    scalars = [col[0] for col, varies in zip(columns, varying, strict=False) if not varies]
    arrays = [list(col) for col, varies in zip(columns, varying, strict=False) if varies]
    return varying, scalars + arrays


def insert_jobs_postgresql(
    columns: Sequence[tuple[str, str]], varying: Sequence[bool], notifies: int, table: str = JOB
) -> str:
    """One INSERT per batch of any size (see :func:`unnest_rows`) that also reads the clock
    and sends ``notifies`` NOTIFYs (delivered at commit), so an enqueue in autocommit mode is
    one statement. The rows carry ``available_at`` = their ``run_at`` or NULL and a last
    column ``bq_delay`` (seconds); the clock fills ``created_at``, ``updated_at`` and a
    delayed ``available_at``. Conflicts (id, dedupe key) insert nothing; RETURNING answers
    the ids inserted. Params: ``now`` (NULL: ``statement_timestamp()``), a (channel, queue)
    pair per NOTIFY, then :func:`unnest_params` of the rows."""
    names = [c for c, _ in columns]
    rows = unnest_rows([*names, "bq_delay"], [*(t for _, t in columns), "float8"], varying)
    picked = [
        "t.now"
        if name in ("created_at", "updated_at")
        else "COALESCE(v.available_at, t.now + make_interval(secs => v.bq_delay))"
        if name == "available_at"
        else f"v.{name}"
        for name in names
    ]
    clock = "SELECT COALESCE(%s::timestamptz, statement_timestamp()) AS now"
    clock += "".join(f", pg_notify(%s, %s) AS n{i}" for i in range(notifies))
    return (
        f"INSERT INTO {table} ({', '.join(names)}) "
        f"SELECT {', '.join(picked)} FROM ({clock}) AS t CROSS JOIN {rows} AS v "
        "ON CONFLICT DO NOTHING RETURNING id"
    )


def insert_jobs_sqlite(columns: Sequence[str], n: int, table: str = JOB) -> str:
    """Multi-row INSERT of ``n`` rows; conflicts insert nothing, RETURNING answers the rest."""
    row = "(" + ", ".join(["%s"] * len(columns)) + ")"
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([row] * n)} "
        "ON CONFLICT DO NOTHING RETURNING id"
    )


def claim_sqlite(n_queues: int) -> str:
    """Params: *queues, now, limit, lease_expires_at, now, now (all times as stored text)."""
    queues = ", ".join(["%s"] * n_queues)
    return f"""
UPDATE {JOB}
SET state = 'inflight',
    attempts = attempts + 1,
    lease_token = lower(hex(randomblob(16))),
    lease_expires_at = %s,
    started_at = %s,
    updated_at = %s
WHERE id IN (
    SELECT id FROM {JOB}
    WHERE state = 'pending' AND queue IN ({queues}) AND available_at <= %s
    ORDER BY priority DESC, available_at, id
    LIMIT %s
)
RETURNING {CLAIM_COLUMNS}
"""


# Batched acks: one UPDATE … FROM (VALUES …) fenced by (id, token, state = 'inflight').
# v.column1..12: id, token, state, result, error, traceback, reason, available_at,
# finished_at, give_back (0/1), yields_to_cancel (0/1), progress_done (0/1).
ACK_COLUMNS = 12
_PG_CASTS = (
    "varchar",
    "varchar",
    "varchar",
    "bytea",
    "text",
    "text",
    "varchar",
    "timestamptz",
    "timestamptz",
    "integer",
    "integer",
    "integer",
)


@cache
def _ack_set(table: str) -> str:
    return f"""
SET state = CASE WHEN v.column11 = 1 AND {table}.cancel_requested THEN 'cancelled'
                 ELSE v.column3 END,
    attempts = {table}.attempts - v.column10,
    result = CASE WHEN v.column3 = 'done' THEN v.column4 ELSE {table}.result END,
    error = COALESCE(v.column5, {table}.error),
    traceback = CASE WHEN v.column5 IS NULL THEN {table}.traceback ELSE v.column6 END,
    reason = CASE WHEN v.column11 = 1 AND {table}.cancel_requested THEN 'cancelled'
                  ELSE COALESCE(v.column7, {table}.reason) END,
    available_at = COALESCE(v.column8, {table}.available_at),
    finished_at = CASE WHEN v.column3 = 'pending'
                            AND NOT (v.column11 = 1 AND {table}.cancel_requested)
                       THEN NULL ELSE v.column9 END,
    progress = CASE WHEN v.column12 = 1 THEN 100 ELSE {table}.progress END,
    lease_token = NULL,
    lease_expires_at = NULL,
    updated_at = v.column9
"""


def ack_many_postgresql(varying: Sequence[bool], table: str = JOB) -> str:
    """``ack_many`` for PostgreSQL with the rows as one ``unnest`` source (:func:`unnest_rows`):
    the same statement text for any batch size, and the clock read by the statement itself
    (no round trip for it). Column 8 carries the retry delay in seconds (NULL: leave
    ``available_at``), column 9 is the clock. Params: :func:`unnest_params`, then ``now``
    (NULL: ``statement_timestamp()``)."""
    names = [f"column{i}" for i in range(1, ACK_COLUMNS + 1)]
    casts = [*_PG_CASTS[:7], "float8", *_PG_CASTS[8:]]
    picked = [
        "CASE WHEN d.column8 IS NULL THEN NULL "
        "ELSE t.now + make_interval(secs => d.column8) END AS column8"
        if name == "column8"
        else "t.now AS column9"
        if name == "column9"
        else f"d.{name}"
        for name in names
    ]
    rows = (
        f"(SELECT {', '.join(picked)} FROM {unnest_rows(names, casts, varying)} AS d, "
        "(SELECT COALESCE(%s::timestamptz, statement_timestamp()) AS now) AS t)"
    )
    return (
        f"UPDATE {table} {_ack_set(table)} FROM {rows} AS v "
        f"WHERE {table}.id = v.column1 AND {table}.lease_token = v.column2 "
        f"AND {table}.state = 'inflight' "
        "RETURNING id, state, queue, flow_id, parent_id, attempts, name, parent_backend"
    )


def ack_many(vendor: str, n: int, table: str = JOB) -> str:
    if vendor == "postgresql":
        row = "(" + ", ".join(f"%s::{c}" for c in _PG_CASTS) + ")"
        alias = "v(" + ", ".join(f"column{i}" for i in range(1, ACK_COLUMNS + 1)) + ")"
    else:
        row = "(" + ", ".join(["%s"] * ACK_COLUMNS) + ")"
        alias = "v"
    values = ", ".join([row] * n)
    return (
        f"UPDATE {table} {_ack_set(table)} FROM (VALUES {values}) AS {alias} "
        f"WHERE {table}.id = v.column1 AND {table}.lease_token = v.column2 "
        f"AND {table}.state = 'inflight' "
        "RETURNING id, state, queue, flow_id, parent_id, attempts, name, parent_backend"
    )


def renew_many(vendor: str, n: int, table: str = JOB, returning: str = "id") -> str:
    """Params per row: id, token; then the new expiry twice. Never shortens a lease."""
    if vendor == "postgresql":
        row, alias = "(%s::varchar, %s::varchar)", "v(column1, column2)"
    else:
        row, alias = "(%s, %s)", "v"
    values = ", ".join([row] * n)
    return (
        f"UPDATE {table} SET lease_expires_at = CASE WHEN {table}.lease_expires_at > %s "
        f"THEN {table}.lease_expires_at ELSE %s END "
        f"FROM (VALUES {values}) AS {alias} "
        f"WHERE {table}.id = v.column1 AND {table}.lease_token = v.column2 "
        f"AND {table}.state = 'inflight' RETURNING {returning}"
    )


def release_dependants(vendor: str, n: int, table: str = JOB) -> str:
    """Blocked DAG jobs whose every dependency is done → pending. Params: now, now, *ids."""
    ids = ", ".join(["%s"] * n)
    return f"""
UPDATE {table} SET state = 'pending', available_at = %s, updated_at = %s
WHERE state = 'blocked'
  AND id IN (SELECT job_id FROM {DEP} WHERE kind = 'dag' AND depends_on_id IN ({ids}))
  AND NOT EXISTS (  -- a dependency not stored yet (relayed later) is not done either
      SELECT 1 FROM {DEP} d LEFT JOIN {table} dj ON dj.id = d.depends_on_id
      WHERE d.job_id = {table}.id AND d.kind = 'dag'
        AND (dj.state IS NULL OR dj.state <> 'done'))
RETURNING id, queue
"""


def lock_dependants(n: int, table: str = JOB) -> str:
    """Serialise concurrent releases of the same dependant (PostgreSQL, READ COMMITTED)."""
    ids = ", ".join(["%s"] * n)
    return (
        f"SELECT id FROM {table} WHERE state = 'blocked' AND id IN "
        f"(SELECT job_id FROM {DEP} WHERE kind = 'dag' AND depends_on_id IN ({ids})) "
        "ORDER BY id FOR UPDATE"
    )


def placeholders(items: Sequence[object]) -> str:
    return ", ".join(["%s"] * len(items))


# Child reports onto their parents' manifest rows, only rows still 'pending' (a report is
# recorded once). Per row: parent id, child id, state, result, result type, error.
#
# On PostgreSQL each report finds its row by its own index probe (a LATERAL look-up, LIMIT 1
# so it is not flattened into a join), and the UPDATE then joins by primary key: the plan
# cannot start from the parent's pending rows, which a planner with stale statistics (a wide
# flow landed since the last ANALYZE) otherwise may, joining every report against every one
# of them. SQLite's planner loops over the VALUES and probes the unique (parent, child) edge.
_REPORT_CASTS = ("varchar", "varchar", "varchar", "bytea", "varchar", "text")


def record_reports(vendor: str, n: int) -> str:
    """Params: reported_at, then six per report."""
    if vendor == "postgresql":
        row = "(" + ", ".join(f"%s::{c}" for c in _REPORT_CASTS) + ")"
        return f"""
WITH hit AS MATERIALIZED (
    SELECT d.id, v.column3 AS status, v.column4 AS result, v.column5 AS result_type,
           v.column6 AS error, t.reported_at
    FROM (SELECT %s::timestamptz AS reported_at) AS t,
         (VALUES {", ".join([row] * n)}) AS v(column1, column2, column3, column4, column5, column6)
    CROSS JOIN LATERAL (
        SELECT id FROM {DEP}
        WHERE job_id = v.column1 AND depends_on_id = v.column2
          AND kind = 'child' AND status = 'pending'
        LIMIT 1
    ) AS d
)
UPDATE {DEP} SET status = hit.status, result = hit.result, result_type = hit.result_type,
    error = hit.error, reported_at = hit.reported_at
FROM hit WHERE {DEP}.id = hit.id AND {DEP}.status = 'pending'
RETURNING {DEP}.job_id, {DEP}.depends_on_id, {DEP}.status
"""
    row, alias = "(%s, %s, %s, %s, %s, %s)", "v"
    values = ", ".join([row] * n)
    return (
        f"UPDATE {DEP} SET status = v.column3, result = v.column4, result_type = v.column5, "
        f"error = v.column6, reported_at = %s FROM (VALUES {values}) AS {alias} "
        f"WHERE {DEP}.job_id = v.column1 AND {DEP}.depends_on_id = v.column2 "
        f"AND {DEP}.kind = 'child' AND {DEP}.status = 'pending' "
        f"RETURNING {DEP}.job_id, {DEP}.depends_on_id, {DEP}.status"
    )


# A child's report straight from its job row, in the transaction of its ack (its parent is on
# this backend). The same recording as ``record_reports``: only pending rows change, and on
# PostgreSQL each child finds its manifest row by its own probe of ``bq_dep_dependency``.
@cache
def record_children_postgresql(table: str = JOB) -> str:
    """Params: the child ids (one array; terminal children of parents here), reported_at
    (NULL: the statement's clock)."""
    return f"""
WITH hit AS MATERIALIZED (
    SELECT d.id, j.state, j.result, j.content_type, j.error
    FROM unnest(%s::varchar[]) AS c(id)
    CROSS JOIN LATERAL (
        SELECT id, job_id FROM {DEP}
        WHERE depends_on_id = c.id AND kind = 'child' AND status = 'pending'
        LIMIT 1
    ) AS d
    JOIN {table} AS j ON j.id = c.id AND j.parent_id = d.job_id
)
UPDATE {DEP} SET status = hit.state,
    result = CASE WHEN hit.state = 'done' THEN hit.result ELSE NULL END,
    result_type = hit.content_type,
    error = CASE WHEN hit.state = 'done' THEN NULL ELSE hit.error END,
    reported_at = COALESCE(%s::timestamptz, statement_timestamp())
FROM hit WHERE {DEP}.id = hit.id AND {DEP}.status = 'pending'
RETURNING {DEP}.job_id, {DEP}.depends_on_id, {DEP}.status
"""


def record_children_sqlite(n: int, table: str = JOB) -> str:
    """Params: reported_at, ``n`` child ids (terminal children of parents here)."""
    return f"""
UPDATE {DEP} SET status = j.state,
    result = CASE WHEN j.state = 'done' THEN j.result ELSE NULL END,
    result_type = j.content_type,
    error = CASE WHEN j.state = 'done' THEN NULL ELSE j.error END,
    reported_at = %s
FROM {table} AS j
WHERE {DEP}.depends_on_id IN ({", ".join(["%s"] * n)})
  AND {DEP}.kind = 'child' AND {DEP}.status = 'pending'
  AND j.id = {DEP}.depends_on_id AND j.parent_id = {DEP}.job_id
RETURNING {DEP}.job_id, {DEP}.depends_on_id, {DEP}.status
"""


_DUE = f"""
  AND (NOT EXISTS (SELECT 1 FROM {DEP} AS d
                   WHERE d.job_id = j.id AND d.kind = 'child' AND d.status = 'pending')
       OR (COALESCE(j.flow_mode, '') <> 'continue'
           AND EXISTS (SELECT 1 FROM {DEP} AS d
                       WHERE d.job_id = j.id AND d.kind = 'child' AND d.status = 'failed')))
"""


def due_parents(n: int, table: str = JOB) -> str:
    """Waiting parents among ``n`` ids with no pending child, or with a failed one unless
    ``on_child_failure="continue"``. Params: the ids."""
    return f"""
SELECT j.id FROM {table} AS j
WHERE j.id IN ({", ".join(["%s"] * n)}) AND j.state = 'waiting_children' {_DUE}
"""


@cache
def settle_due_postgresql(table: str = JOB) -> str:
    """The relay's settle in one statement: of the waiting parents among the ids (one array),
    the due ones are locked ancestors first (``flow_depth``, id) and re-pended. A parent
    settled meanwhile by another relay fails the re-check under its lock; once due, a parent
    stays due (a report never turns pending again). RETURNING: id, queue, the clock."""
    return f"""
UPDATE {table} AS p SET state = 'pending', available_at = t.now, updated_at = t.now
FROM (SELECT statement_timestamp() AS now) AS t,
     (SELECT j.id FROM {table} AS j
      WHERE j.id = ANY(%s::varchar[]) AND j.state = 'waiting_children' {_DUE}
      ORDER BY j.flow_depth, j.id
      FOR UPDATE OF j) AS due
WHERE p.id = due.id AND p.state = 'waiting_children'
RETURNING p.id, p.queue, t.now
"""


def tally_children(n: int) -> str:
    """(parent, status, count) of the children of ``n`` parents. Params: the parent ids."""
    return (
        f"SELECT job_id, status, count(*) FROM {DEP} "
        f"WHERE kind = 'child' AND job_id IN ({', '.join(['%s'] * n)}) GROUP BY job_id, status"
    )


def settle_parents(n: int, table: str = JOB) -> str:
    """Re-pend those of ``n`` parents still waiting. Params: now, now, the ids."""
    return (
        f"UPDATE {table} SET state = 'pending', available_at = %s, updated_at = %s "
        f"WHERE state = 'waiting_children' AND id IN ({', '.join(['%s'] * n)}) "
        "RETURNING id, queue"
    )


def park_parents(vendor: str, n: int, table: str = JOB) -> str:
    """Fan-out acks, fenced like every ack: a parent whose cancel was requested is
    cancelled, the others wait for their children in phase ``collect``. Params: now (twice),
    then id and token per parent. RETURNING: id, state, queue, attempts."""
    row = "(%s::varchar, %s::varchar)" if vendor == "postgresql" else "(%s, %s)"
    alias = "v(column1, column2)" if vendor == "postgresql" else "v"
    return f"""
UPDATE {table}
SET state = CASE WHEN {table}.cancel_requested THEN 'cancelled' ELSE 'waiting_children' END,
    flow_phase = CASE WHEN {table}.cancel_requested THEN {table}.flow_phase ELSE 'collect' END,
    reason = CASE WHEN {table}.cancel_requested THEN 'cancelled' ELSE {table}.reason END,
    finished_at = CASE WHEN {table}.cancel_requested THEN %s ELSE {table}.finished_at END,
    lease_token = NULL, lease_expires_at = NULL, updated_at = %s
FROM (VALUES {", ".join([row] * n)}) AS {alias}
WHERE {table}.id = v.column1 AND {table}.lease_token = v.column2
  AND {table}.state = 'inflight'
RETURNING {table}.id, {table}.state, {table}.queue, {table}.attempts
"""


_MANIFEST_COLUMNS = (
    ("flow_id", "varchar"),
    ("kind", "varchar"),
    ("job_id", "varchar"),
    ("depends_on_id", "varchar"),
    ("key", "varchar"),
    ("spec", "jsonb"),
    ("status", "varchar"),
    ("created_at", "timestamptz"),
)


def insert_manifest_postgresql(varying: Sequence[bool]) -> str:
    """Manifest rows from :func:`unnest_params`; a repeated (parent, child) is ignored."""
    names = [c for c, _ in _MANIFEST_COLUMNS]
    rows = unnest_rows(names, [t for _, t in _MANIFEST_COLUMNS], varying)
    return (
        f"INSERT INTO {DEP} ({', '.join(names)}) SELECT {', '.join(names)} FROM {rows} AS v "
        "ON CONFLICT DO NOTHING"
    )


def insert_manifest_sqlite(n: int) -> str:
    names = [c for c, _ in _MANIFEST_COLUMNS]
    row = "(" + ", ".join(["%s"] * len(names)) + ")"
    return (
        f"INSERT INTO {DEP} ({', '.join(names)}) VALUES {', '.join([row] * n)} "
        "ON CONFLICT DO NOTHING"
    )
