"""The flow statements of the job table: DAG releases, child reports, settles, manifests.

Reports are recorded only on rows still ``pending`` (once each); a settle re-pends a due parent
that still waits. Each statement that carries a rule of ``core.rules`` names it (``rule:``):
dag-release, report-once, settle-due.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from django_blamequeue.backends.jobtable.sql import DEP, JOB, unnest_rows
from django_blamequeue.core.rules import CONTINUE


def release_dependants(vendor: str, n: int, table: str = JOB) -> str:
    """Blocked DAG jobs whose every dependency is done → pending (rule: dag-release).
    Params: now, now, *ids."""
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
    """Reports onto pending manifest rows only (rule: report-once). Params: reported_at,
    then six per report."""
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
    """Reports straight from the children's rows, onto pending manifest rows only (rule:
    report-once). Params: the child ids (one array; terminal children of parents here),
    reported_at (NULL: the statement's clock)."""
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


# rule: settle-due (core.rules.settle_due), for the parent rows ``j``.
_DUE = f"""
  AND (NOT EXISTS (SELECT 1 FROM {DEP} AS d
                   WHERE d.job_id = j.id AND d.kind = 'child' AND d.status = 'pending')
       OR (COALESCE(j.flow_mode, '') <> '{CONTINUE}'
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


def insert_manifest_postgresql(varying: Sequence[bool | str]) -> str:
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
