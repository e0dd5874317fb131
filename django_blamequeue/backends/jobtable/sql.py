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
CONTROL = "blamequeue_queue_control"
# Statements that both job tables run take ``table``: the local backend's ``JOB`` (the
# default, so its statements are unchanged) or the SQS ledger's.

CLAIM_COLUMNS = (
    "id, queue, name, payload, content_type, content_encoding, lease_token, attempts, "
    "max_attempts, lease_expires_at, priority, timeout, trace_id, classification, flow_id, "
    "parent_id, available_at, created_at, flow_phase, flow_mode, flow_depth, stalls, "
    "checkpoint, concurrency_key, snoozes"
)
#: The PostgreSQL claim's RETURNING: ``CLAIM_COLUMNS``, with the three times as seconds since
#: the epoch (float8: exact to the microsecond for centuries), which the worker turns into
#: datetimes far more cheaply than the driver's time zone-aware loader (``rows.py``).
_EPOCH_COLUMNS = frozenset({"lease_expires_at", "available_at", "created_at"})
_PG_CLAIM_RETURNING = ", ".join(
    f"extract(epoch FROM j.{c})::float8 AS {c}" if c in _EPOCH_COLUMNS else f"j.{c}"
    for c in (c.strip() for c in CLAIM_COLUMNS.split(","))
)
#: A queue whose control row says ``limited`` (paused, or live limits set) is left to the
#: limited claim (``limited.py``): the unlimited claim skips it (rule: paused), so a worker
#: whose cached control state is stale never claims past a pause or a new limit.
_UNLIMITED = (
    f"NOT EXISTS (SELECT 1 FROM {CONTROL} k WHERE k.backend = %s AND k.queue = {{q}} AND k.limited)"
)


def not_expired(now: str, table: str = "") -> str:
    """rule: expiry — a claim never leases a job whose ``expires_at`` has passed (the sweeper
    cancels it, ``jobtable/expiry.py``). ``now``: the SQL of the claim's clock."""
    column = f"{table}.expires_at" if table else "expires_at"
    return f"({column} IS NULL OR {column} > {now})"


#: The end of both PostgreSQL claims: the ``picked`` rows leased, by key. Params: now,
#: lease_seconds, now, now.
_LEASE_PICKED = f"""UPDATE {JOB} AS j
SET state = 'inflight',
    attempts = j.attempts + 1,
    lease_token = replace(gen_random_uuid()::text, '-', ''),
    lease_expires_at = COALESCE(%s, statement_timestamp()) + make_interval(secs => %s),
    started_at = COALESCE(%s, statement_timestamp()),
    updated_at = COALESCE(%s, statement_timestamp())
WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING {_PG_CLAIM_RETURNING}
"""


@cache
def claim_postgresql(limit: int) -> str:
    """Params: queues (a list), the backend's alias, now, now, now, lease_seconds, now, now.
    Answers ``CLAIM_COLUMNS``, the times as epoch seconds (``rows.claimed_from_pg_row``).

    One ordered index scan per queue (``LATERAL``): ``queue IN (…)`` over several queues
    cannot use the claim index's order and sorts every ready row. Each queue locks at most
    ``limit`` rows; the best ``limit`` of them are claimed, and the other locks end with the
    transaction (with one queue, exactly ``limit`` rows are locked).

    ``limit`` is written into the text (one statement per limit a worker asks for: its free
    slots), not bound: the statement is prepared (``prepared.py``) and planned once, and a
    plan made for an unknown ``LIMIT`` sorts every ready row instead of reading the index in
    order. For the same reason the claimed rows are updated by key (``id = ANY(…)``: an index
    look-up per id whatever the statistics said when the plan was made), not joined back: a
    plan made while the table looked empty joined them by scanning the whole table.
    """
    return f"""
WITH picked AS ({_picked(limit)})
{_LEASE_PICKED}"""


def _picked(limit: int) -> str:
    """The ids :func:`claim_postgresql` leases. Params: queues, the backend's alias, now, now."""
    return f"""
    SELECT c.id FROM (
        SELECT u.name FROM unnest(%s::varchar[]) AS u(name) WHERE {_UNLIMITED.format(q="u.name")}
    ) AS q
    CROSS JOIN LATERAL ({_claimable_of_queue(limit)}) AS c
    ORDER BY c.priority DESC, c.available_at, c.id
    LIMIT {int(limit)}
"""


#: The claim's clock: the caller's ``now`` if it gives one (a parameter), else the database's.
_NOW_PARAM = "COALESCE(%s, statement_timestamp())"


def _claimable_of_queue(
    limit: int, where: str = "", now: str = _NOW_PARAM, lock: bool = True
) -> str:
    """The first ``limit`` claimable jobs of the queue ``q.name`` (the caller's row source),
    in claim order (rule: priority, then due time, then id), read in order from the claim
    index: pending, due by ``now``, not expired, and ``where``. Locked (``SKIP LOCKED``) for a
    claim; unlocked for a read that only looks. Params: ``now``'s, twice."""
    extra = f"AND {where} " if where else ""
    return (
        f"SELECT id, priority, available_at FROM {JOB} "
        f"WHERE state = 'pending' AND queue = q.name {extra}"
        f"AND available_at <= {now} AND {not_expired(now)} "
        f"ORDER BY priority DESC, available_at, id LIMIT {int(limit)}"
        + (" FOR UPDATE SKIP LOCKED" if lock else "")
    )


#: The first claimable job of each queue, read from the start of the claim index without a
#: lock (``claim_start.py``: the sweeper's scout, which moves a worker's point back to a job
#: sorting before it). Params: queues (a list). Answers (queue, priority, available_at, id),
#: one row per queue that has a job due.
SCOUT_POSTGRESQL = f"""
SELECT q.name, c.priority, c.available_at, c.id
FROM unnest(%s::varchar[]) AS q(name)
CROSS JOIN LATERAL ({_claimable_of_queue(1, now="statement_timestamp()", lock=False)}) AS c"""


@cache
def claim_postgresql_onward(limit: int) -> str:
    """The claim started after a point per queue (``claim_start.py``), same answer as
    :func:`claim_postgresql`. Params: queues, their points' priorities, times and ids (four
    arrays, a point's three None where a queue has none), the backend's alias, now × 6,
    now, lease_seconds, now, now.

    Per queue three ordered reads of the claim index, each started by the index at its
    bound, each read only while the ones before it found fewer than ``limit`` rows: the higher
    priorities from the start, the point's priority after the point (a row comparison on
    ``(available_at, id)``: where the index read starts), the lower priorities from the
    start. A queue without a point has only the third (every priority).
    """
    return f"""
WITH picked AS ({_picked_onward(limit)})
{_LEASE_PICKED}"""


def _picked_onward(limit: int) -> str:
    """The ids :func:`claim_postgresql_onward` leases. Params: queues, their points'
    priorities, times and ids, the backend's alias, now × 6."""
    parts = [
        "priority > q.prio",
        "priority = q.prio AND (available_at, id) > (q.at, q.after_id)",
        "priority < COALESCE(q.prio, 2147483648)",
    ]
    reads = " UNION ALL ".join(
        f"SELECT * FROM ({_claimable_of_queue(limit, w)}) AS r{i}" for i, w in enumerate(parts)
    )
    return f"""
    SELECT c.id FROM (
        SELECT u.name, u.prio, u.at, u.after_id
        FROM unnest(%s::varchar[], %s::int8[], %s::timestamptz[], %s::varchar[])
            AS u(name, prio, at, after_id)
        WHERE {_UNLIMITED.format(q="u.name")}
    ) AS q
    CROSS JOIN LATERAL ({reads} LIMIT {int(limit)}) AS c
    ORDER BY c.priority DESC, c.available_at, c.id
    LIMIT {int(limit)}
"""


#: ``varying`` of a column sent as one text of comma-separated values (ids, lease tokens):
#: psycopg dumps a list element by element in Python, a ``str`` in C.
JOINED = "joined"
#: ``varying`` of a column that is NULL in every row: written into the text, no parameter.
NULL = "null"


def unnest_rows(
    names: Sequence[str], db_types: Sequence[str], varying: Sequence[bool | str]
) -> str:
    """A batch of rows as one row source of constant size (PostgreSQL): one array parameter
    per column whose value varies across the batch, unnested, one scalar parameter per
    column that is the same in every row, and a typed NULL in the text for a column that is
    NULL in every row. Params: the scalars, then the arrays, each in column order. The
    statement text depends on the column types and which columns are NULL, not on the batch
    size or the values, and the driver converts a handful of parameters instead of rows ×
    columns."""
    select, arrays, aliases = [], [], []
    for i, (name, db_type, varies) in enumerate(zip(names, db_types, varying, strict=True)):
        if varies is True or varies == JOINED:
            source = "string_to_array(%s::text, ',')" if varies == JOINED else "%s"
            arrays.append(f"{source}::{db_type}[]")
            aliases.append(f"c{i}")
            select.append(f"u.c{i} AS {name}")
        elif varies == NULL:
            select.append(f"NULL::{db_type} AS {name}")
        else:
            select.append(f"%s::{db_type} AS {name}")
    return (
        f"(SELECT {', '.join(select)} FROM unnest({', '.join(arrays)}) AS u({', '.join(aliases)}))"
    )


def unnest_params(
    columns: Sequence[tuple[Any, ...]], joined: int = 0
) -> tuple[tuple[bool | str, ...], list[Any]]:
    """``varying`` and the params of :func:`unnest_rows` for column-wise values. The first
    ``joined`` columns, when they vary and are strings without a comma, go as one text.

    A column NULL in every row is no parameter at all: a single enqueue sends ≈ 20 values
    instead of ≈ 50, under psycopg's limit (50) for caching a statement's conversion, which
    otherwise re-parses the ≈ 3 kB text at every call (≈ 100 µs of an enqueue's CPU)."""
    varying: list[bool | str] = [True]  # the first column is always an array: the row count
    for col in columns[1:]:
        first = col[0]
        if len(col) > 1 and col.count(first) != len(col):
            varying.append(True)
        else:
            varying.append(NULL if first is None else False)
    texts: dict[int, str] = {}
    for i in range(joined):
        if varying[i] is not True:
            continue
        try:
            text = ",".join(columns[i])
        except TypeError:  # a value that is not a string (None): an array
            continue
        if text.count(",") == len(columns[i]) - 1:  # no value has a comma of its own
            texts[i], varying[i] = text, JOINED
    scalars = [col[0] for col, varies in zip(columns, varying, strict=False) if varies is False]
    arrays = [
        texts[i] if varies == JOINED else list(col)
        for i, (col, varies) in enumerate(zip(columns, varying, strict=False))
        if varies is True or varies == JOINED
    ]
    return tuple(varying), scalars + arrays


@cache
def insert_jobs_postgresql(
    columns: Sequence[tuple[str, str]],
    varying: Sequence[bool | str],
    notifies: int,
    table: str = JOB,
) -> str:
    """One INSERT per batch of any size (see :func:`unnest_rows`) that also reads the clock
    and sends ``notifies`` NOTIFYs (delivered at commit), so an enqueue in autocommit mode is
    one statement. The rows carry ``available_at`` = their ``run_at`` or NULL and a last
    column ``bq_delay`` (seconds); the clock fills ``created_at``, ``updated_at`` and a
    delayed ``available_at``. Conflicts (id, dedupe key) insert nothing; RETURNING answers
    the ids inserted. Params: ``now`` (NULL: ``statement_timestamp()``), a (channel, queue)
    pair per NOTIFY, then :func:`unnest_params` of the rows. Cached per shape (``columns``
    and ``varying`` are tuples), so the hot path does not rebuild the text."""
    names = [c for c, _ in columns]
    rows = unnest_rows(
        [*names, "bq_delay", "bq_expires"], [*(t for _, t in columns), "float8", "float8"], varying
    )
    picked = [
        "t.now"
        if name in ("created_at", "updated_at")
        else "COALESCE(v.available_at, t.now + make_interval(secs => v.bq_delay))"
        if name == "available_at"
        else "COALESCE(v.expires_at, t.now + make_interval(secs => v.bq_expires))"
        if name == "expires_at"
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
    """Params: lease_expires_at, now, now, *queues, the backend's alias, now, now, limit (times
    as stored text)."""
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
    WHERE state = 'pending' AND queue IN ({queues}) AND {_UNLIMITED.format(q=JOB + ".queue")}
      AND available_at <= %s AND {not_expired("%s")}
    ORDER BY priority DESC, available_at, id
    LIMIT %s
)
RETURNING {CLAIM_COLUMNS}
"""


# Batched acks: one UPDATE … FROM (VALUES …) fenced by (id, token, state = 'inflight').
# v.column1..14: id, token, state, result, error, traceback, reason, available_at,
# finished_at, give_back (0/1), yields_to_cancel (0/1), progress_done (0/1), snoozed (0/1),
# error_type.
ACK_COLUMNS = 14
#: What an applied ack answers, by position (``acks.py``, ``attempts.py`` read them).
ACK_RETURNING = (
    "id, state, queue, flow_id, parent_id, attempts, name, parent_backend, started_at, updated_at"
)
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
    "integer",
    "varchar",
)


@cache
def _ack_set(table: str, vendor: str = "postgresql") -> str:
    """The SET of every ack; its state CASE is rule: cancel-wins (a cancel request turns a
    yielding transition, column 11, into cancelled). A done job keeps no error: its error,
    traceback, error type and reason are cleared (the audit trail keeps each attempt's); any
    other ack that writes an error writes its type and traceback with it. On SQLite an
    ``available_at`` that is no time (a row written past the API, failed as ``bad_job``) is
    replaced by the ack's clock, so the finished row reads back."""
    kept = f"{table}.available_at"
    if vendor != "postgresql":
        kept = (
            f"CASE WHEN typeof({kept}) = 'text' AND {kept} GLOB '[0-9][0-9][0-9][0-9]-*' "
            f"THEN {kept} ELSE v.column9 END"
        )
    return f"""
SET state = CASE WHEN v.column11 = 1 AND {table}.cancel_requested THEN 'cancelled'
                 ELSE v.column3 END,
    attempts = {table}.attempts - v.column10,
    result = CASE WHEN v.column3 = 'done' THEN v.column4 ELSE {table}.result END,
    error = CASE WHEN v.column3 = 'done' THEN NULL ELSE COALESCE(v.column5, {table}.error) END,
    traceback = CASE WHEN v.column3 = 'done' THEN NULL
                     WHEN v.column5 IS NULL THEN {table}.traceback ELSE v.column6 END,
    error_type = CASE WHEN v.column3 = 'done' THEN NULL
                      WHEN v.column5 IS NULL THEN {table}.error_type ELSE v.column14 END,
    reason = CASE WHEN v.column11 = 1 AND {table}.cancel_requested THEN 'cancelled'
                  WHEN v.column3 = 'done' THEN NULL
                  ELSE COALESCE(v.column7, {table}.reason) END,
    available_at = COALESCE(v.column8, {kept}),
    finished_at = CASE WHEN v.column3 = 'pending'
                            AND NOT (v.column11 = 1 AND {table}.cancel_requested)
                       THEN NULL ELSE v.column9 END,
    progress = CASE WHEN v.column12 = 1 THEN 100 ELSE {table}.progress END,
    snoozes = {table}.snoozes + v.column13,
    lease_token = NULL,
    lease_expires_at = NULL,
    updated_at = v.column9
"""


#: ``state = 'inflight'`` that no partial index's predicate matches: the value comes from an
#: InitPlan, which the planner cannot prove equal to the ``bq_job_inflight`` index's
#: ``state = 'inflight'``. With the literal, a batch of acks was planned as a read of that
#: whole index hashed against the batch, and the index keeps an entry for every job acked
#: until vacuum (forever while the xmin horizon is pinned): acks of 50 slowed from 2.9 ms to
#: 7.4 ms over 50,000 jobs, to 8.5 ms with the horizon pinned. The PostgreSQL ack also finds
#: its rows by ``id = ANY(…)`` (without it a plan made on a small table read the whole
#: primary key); by key acks of 50 stay at 2.2–2.9 ms (docs/perf-notes.md, "Acks by key").
_INFLIGHT_BY_KEY = "(SELECT 'inflight'::varchar)"


@cache
def ack_many_postgresql(varying: Sequence[bool | str], table: str = JOB) -> str:
    """``ack_many`` for PostgreSQL with the rows as one ``unnest`` source (:func:`unnest_rows`):
    the same statement text for any batch size, and the clock read by the statement itself
    (no round trip for it). Column 8 carries the retry delay in seconds (NULL: leave
    ``available_at``), column 9 is the clock. Params: :func:`unnest_params`, then ``now``
    (NULL: ``statement_timestamp()``). Cached per shape (``varying`` is a tuple)."""
    return f"WITH v AS MATERIALIZED {_ack_rows(varying)} {_ack_update(table)}"


def _ack_rows(varying: Sequence[bool | str]) -> str:
    """The acks as rows ``v`` of :func:`ack_many_postgresql`. Params: :func:`unnest_params`,
    then ``now``."""
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
    return (
        f"(SELECT {', '.join(picked)} FROM {unnest_rows(names, casts, varying)} AS d, "
        "(SELECT COALESCE(%s::timestamptz, statement_timestamp()) AS now) AS t)"
    )


def _ack_update(table: str) -> str:
    """The fenced ``UPDATE`` of :func:`ack_many_postgresql`, from the rows ``v``."""
    return (
        f"UPDATE {table} {_ack_set(table)} FROM v "
        f"WHERE {table}.id = ANY(ARRAY(SELECT column1 FROM v)) "  # by key, see _INFLIGHT_BY_KEY
        f"AND {table}.id = v.column1 AND {table}.lease_token = v.column2 "  # rule: fence
        f"AND {table}.state = {_INFLIGHT_BY_KEY} "
        f"RETURNING {ACK_RETURNING}"
    )


def ack_many(vendor: str, n: int, table: str = JOB) -> str:
    """The batched ack of ``n`` rows on SQLite (PostgreSQL's is :func:`ack_many_postgresql`)."""
    values = ", ".join(["(" + ", ".join(["%s"] * ACK_COLUMNS) + ")"] * n)
    return (
        f"UPDATE {table} {_ack_set(table, vendor)} FROM (VALUES {values}) AS v "
        f"WHERE {table}.id = v.column1 AND {table}.lease_token = v.column2 "  # rule: fence
        f"AND {table}.state = 'inflight' "
        f"RETURNING {ACK_RETURNING}"
    )


def renew_many(vendor: str, n: int, table: str = JOB, returning: str = "id") -> str:
    """Params per row: id, token; then the new expiry twice. Never shortens a lease."""
    if vendor == "postgresql":
        row, alias, inflight = "(%s::varchar, %s::varchar)", "v(column1, column2)", _INFLIGHT_BY_KEY
    else:
        row, alias, inflight = "(%s, %s)", "v", "'inflight'"
    values = ", ".join([row] * n)
    return (
        f"UPDATE {table} SET lease_expires_at = CASE WHEN {table}.lease_expires_at > %s "
        f"THEN {table}.lease_expires_at ELSE %s END "
        f"FROM (VALUES {values}) AS {alias} "
        f"WHERE {table}.id = v.column1 AND {table}.lease_token = v.column2 "
        f"AND {table}.state = {inflight} RETURNING {returning}"
    )


def placeholders(items: Sequence[object]) -> str:
    return ", ".join(["%s"] * len(items))


_CLAIM_WIDTH = len(CLAIM_COLUMNS.split(","))
_ACK_WIDTH = len(ACK_RETURNING.split(","))
#: The kinds of row :func:`ack_and_claim_postgresql` answers, in the order it answers them,
#: and where in a row each kind's columns are.
LEASED, CLAIM_TIME, ACKED = 0, 1, 2
CLAIMED_COLUMNS = slice(1, 1 + _CLAIM_WIDTH)
ACKED_FIRST = 1 + _CLAIM_WIDTH
ACKED_COLUMNS = slice(ACKED_FIRST, ACKED_FIRST + _ACK_WIDTH)


@cache
def ack_and_claim_postgresql(varying: Sequence[bool | str], limit: int, onward: bool) -> str:
    """A worker's round of acks and a claim as one statement (one round trip, not two): the
    claim of :func:`claim_postgresql` (``onward``: :func:`claim_postgresql_onward`) and the
    acks of :func:`ack_many_postgresql`, each a data-modifying CTE of the same statement.
    They share its snapshot, and the rows they change cannot overlap (the claim takes pending
    rows, an ack changes an inflight one); a job an ack makes pending again is claimed by a
    later round, as after a claim in its own statement.

    Answers rows ``(kind, *CLAIM_COLUMNS, *ACK_RETURNING, claim_seconds)``, each kind's own
    columns filled, the others NULL, in this order: ``LEASED`` rows (as the claim answers
    them), one ``CLAIM_TIME`` row (the seconds from the statement's start to the end of the
    claim, on the server's clock: the claim runs first, so this is its own time, for
    ``claim_start.py``), ``ACKED`` rows (as the ack answers them). Params: the ack's
    (:func:`unnest_params`, now), then the claim's. Cached per shape."""
    picked = _picked_onward(limit) if onward else _picked(limit)
    return f"""
WITH v AS MATERIALIZED {_ack_rows(varying)},
picked AS ({picked}),
leased AS ({_LEASE_PICKED}),
acked AS ({_ack_update(JOB)})
SELECT {LEASED} AS kind, l.*, {_typed_nulls(ACK_RETURNING)}, NULL::float8 FROM leased AS l
UNION ALL
SELECT {CLAIM_TIME}, {_nulls(_CLAIM_WIDTH + _ACK_WIDTH)},
    extract(epoch FROM clock_timestamp() - statement_timestamp())::float8
UNION ALL
SELECT {ACKED}, {_nulls(_CLAIM_WIDTH)}, a.*, NULL FROM acked AS a"""


def _nulls(n: int) -> str:
    return ", ".join(["NULL"] * n)


def _typed_nulls(columns: str) -> str:
    """A NULL of each job column's own type (a UNION's columns take their type from its first
    branch, and two untyped NULLs make a text)."""
    return ", ".join(f"(NULL::{JOB}).{c.strip()}" for c in columns.split(","))
