"""The hot statements on PostgreSQL, bound on the server and prepared once per connection.

Django binds parameters on the client (``server_side_binding`` is off by default) and sends
each statement as new text, which PostgreSQL parses, analyses and plans at every call: 85 µs
of planning for a single enqueue's INSERT, ≈ 270 µs for a claim (docs/perf-notes.md). The
enqueue's INSERT, the claim and the batched ack run here instead: on a psycopg cursor of
Django's own connection (same session, same transaction: an enqueue inside
``transaction.atomic()`` is still a row of the caller's transaction) that binds on the server
and prepares the statement the first time this connection runs it. Each statement's text
depends only on its shape (the number of NOTIFYs, which columns vary across a batch), never
on its values, so a connection holds a handful of them.

Preparing is per server session. Behind a pooler in transaction mode that does not track
prepared statements (PgBouncer before 1.21, or ``max_prepared_statements = 0``) turn it off:
``BLAMEQUEUE["BACKENDS"][alias]["PREPARE"] = False``. Left unset (None), it is on unless the
Django database says the connection is pooled that way: ``OPTIONS["prepare_threshold"]``
set to None explicitly, or ``DISABLE_SERVER_SIDE_CURSORS``. A statement whose prepared form
the server lost or can no longer run (``prepared statement … does not exist``, ``cached plan
must not change result type`` after a migration changed a column it returns) is then
forgotten with every other one of the connection: in autocommit the call runs again at
once, prepared afresh; inside a transaction it fails (the transaction is aborted) and the
next call prepares afresh.

The claim and the batched ack also run under ``plan_cache_mode = force_generic_plan``
(``SET LOCAL``: their own transaction only): left to choose, PostgreSQL keeps planning the
claim anew at every call (its generic plan is costed higher than a custom one, though the plan
is the same: one ordered scan of the claim index per queue). They also run without
sequential scans, bitmap scans, hash and merge joins: that one plan may be made while the
table looks empty, and must still read the claim index in order, and the claimed or acked
rows by key, once it is not.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from functools import cache
from time import perf_counter
from typing import Any

#: SQLSTATEs after which a prepared statement is dropped: invalid_sql_statement_name (the
#: pooler's other session never saw it), feature_not_supported (its result type changed).
_STALE = frozenset({"26000", "0A000"})
_NEVER = sys.maxsize  # a prepare_threshold that never prepares by count alone


def wanted(option: Any, database: Mapping[str, Any]) -> bool:
    """Whether a backend on a PostgreSQL database prepares its hot statements: its
    ``PREPARE`` option, or (None) on unless the Django database is set up for a
    transaction-mode pooler. Never with psycopg2 (what Django uses when psycopg 3 is
    missing), which has no prepared statements."""
    if not _psycopg3():
        return False
    if option is not None:
        return bool(option)
    options = database.get("OPTIONS") or {}
    if "prepare_threshold" in options and options["prepare_threshold"] is None:
        return False
    return not database.get("DISABLE_SERVER_SIDE_CURSORS", False)


def _psycopg3() -> bool:
    try:
        from django.db.backends.postgresql.psycopg_any import is_psycopg3
    except ImportError:  # neither driver: Django's backend will say so
        return False
    return bool(is_psycopg3)


#: The settings of a ``generic`` statement's transaction, in one round trip: one plan for
#: every call, and that plan made of ordered index scans and nested loops only. No JIT: a
#: plan with a disabled node it cannot avoid is priced past ``jit_above_cost``, and JIT would
#: compile it at every call (≈ 300 ms measured, for a statement that runs in 0.2 ms).
GENERIC = (
    "SELECT set_config('plan_cache_mode', 'force_generic_plan', true), "
    "set_config('enable_seqscan', 'off', true), "
    "set_config('enable_bitmapscan', 'off', true), "
    "set_config('enable_hashjoin', 'off', true), "
    "set_config('enable_mergejoin', 'off', true), "
    "set_config('jit', 'off', true)"
)
_BEGIN_GENERIC = f"BEGIN; {GENERIC}"


def fetch(
    connection: Any, statement: str, params: Sequence[Any], *, generic: bool = False
) -> list[tuple[Any, ...]]:
    """Run ``statement`` (``%s`` placeholders) prepared on ``connection`` (Django's
    PostgreSQL connection, psycopg 3) and answer its rows. ``generic``: plan it once for
    every call, from ordered index scans and nested loops only (``GENERIC``, ``SET LOCAL``:
    only inside a transaction). That one plan is made at the connection's first call, maybe
    while the table looks empty, and kept: costed for a few rows, PostgreSQL would read the
    whole table at every claim once a backlog grew (docs/perf-notes.md, "The claim plan made
    on an empty table")."""
    cursor = _cursor(connection)
    raw = connection.connection
    saved = raw.prepare_threshold
    if saved is None:  # Django's default: psycopg prepares nothing, not even when asked
        raw.prepare_threshold = _NEVER
    try:
        with cursor:
            if generic and connection.in_atomic_block and not _begin_generic(connection):
                cursor.execute(GENERIC)
            try:
                cursor.execute(statement, params)
            except Exception as exc:
                if not (_forget_if_stale(connection, exc) and connection.get_autocommit()):
                    raise
                # Autocommit: the failed statement changed nothing; prepared afresh, once.
                cursor.execute(statement, params)
            rows: list[tuple[Any, ...]] = cursor.fetchall()
            return rows
    finally:
        if saved is None:
            raw.prepare_threshold = None


def plan_generic(connection: Any) -> None:
    """Set ``GENERIC`` for the rest of the transaction ``connection`` is in (``SET LOCAL``):
    a worker's round of acks and a claim sends it once, not once per statement."""
    assert connection.in_atomic_block, "SET LOCAL outside a transaction would not hold"
    if not _begin_generic(connection):
        fetch(connection, GENERIC, ())


def _begin_generic(connection: Any) -> bool:
    """Begin the transaction of the ``atomic`` block ``connection`` has just entered with
    the ``GENERIC`` settings, in one round trip: ``BEGIN; SELECT set_config(…)`` as one
    simple query on psycopg's ``pgconn`` (its documented libpq-level access). psycopg would
    send its ``BEGIN`` alone, a round trip of its own, before the settings (≈ 60 µs of a
    worker round's CPU, docs/perf-notes.md). psycopg then sees the session in a transaction
    and sends no ``BEGIN`` of its own; the ``COMMIT`` or ``ROLLBACK`` is its own as before.

    False, nothing sent: the transaction has begun already (a statement ran in the block,
    or an enclosing one), or psycopg would begin it another way (an isolation level, read
    only or deferrable set on the connection): the caller sends ``GENERIC`` as a statement.
    """
    connection.ensure_connection()
    raw = connection.connection
    if (
        raw.autocommit
        or raw.isolation_level is not None
        or raw.read_only is not None
        or raw.deferrable is not None
    ):
        return False
    from psycopg import errors, pq

    if raw.pgconn.transaction_status != pq.TransactionStatus.IDLE:
        return False
    text = _BEGIN_GENERIC
    started = perf_counter()
    with connection.wrap_database_errors:
        result = raw.pgconn.exec_(text.encode())
        if result.status != pq.ExecStatus.TUPLES_OK:
            if raw.pgconn.status == pq.ConnStatus.BAD:  # the session is gone, no SQLSTATE:
                message = result.error_message.decode("utf-8", "replace").strip()
                # psycopg's own error for a lost connection, which callers treat as an outage
                raise errors.OperationalError(f"the connection is lost: {message}")
            raise errors.error_from_result(result, encoding=raw.info.encoding)
    if connection.queries_logged:  # what Django's debug cursor records for a statement
        connection.queries_log.append({"sql": text, "time": f"{perf_counter() - started:.3f}"})
    return True


def _cursor(connection: Any) -> Any:
    """A Django cursor wrapper (thread check, error mapping, query log, execute wrappers)
    around a server-binding psycopg cursor that prepares what it runs."""
    connection.ensure_connection()
    with connection.wrap_database_errors:
        return connection._prepare_cursor(_preparing_cursor()(connection.connection))


@cache
def _preparing_cursor() -> type[Any]:
    import psycopg  # only PostgreSQL gets here: SQLite-only projects need not install it

    class PreparingCursor(psycopg.Cursor[Any]):
        """Binds on the server; prepares every statement unless told otherwise."""

        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            kwargs.setdefault("prepare", True)
            kwargs.setdefault("binary", True)
            return super().execute(query, params, **kwargs)

        def _send_query_prepared(self, name: bytes, pgq: Any, **kwargs: Any) -> None:
            # psycopg records the query it sent only when it is not prepared; Django's query
            # log (``last_executed_query``) reads that record.
            self._query = pgq
            super()._send_query_prepared(name, pgq, **kwargs)

    return PreparingCursor


def _forget_if_stale(connection: Any, exc: BaseException) -> bool:
    """After a prepared statement the server cannot run, make psycopg forget every prepared
    statement of this connection (it does so itself at a ROLLBACK, but not in autocommit,
    nor when the caller rolls back to a savepoint and commits). True: forgotten, the session
    goes on; False: not a stale statement, or the session was closed instead.

    Only psycopg's record is cleared: the ``DEALLOCATE ALL`` that ``clear()`` queues would run
    right *after* the next statement and drop the one that statement just prepared afresh,
    so every other call would fail. What the server still holds (a plan whose result type
    changed) stays unused until the session ends; a lost statement holds nothing."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    if getattr(cause, "sqlstate", None) not in _STALE:
        return False
    raw = connection.connection
    if raw is None or raw.closed:
        return False
    try:
        record = raw._prepared  # psycopg's private record of the session's statements
        record.clear()
        record._to_flush.clear()
    except AttributeError:  # a psycopg that keeps it elsewhere: start a new session instead
        connection.close()
        return False
    return True
