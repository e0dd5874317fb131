"""What is specific to the local backend: the statements it sends to SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import DatabaseError, connections, transaction
from django.test.utils import CaptureQueriesContext

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.jobtable import prepared
from django_blamequeue.core.records import Ack, Transition
from django_blamequeue.core.states import State
from tests.backends.pg_stats import index_entries_read
from tests.conftest import need_server

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

INSERT_JOB = re.compile(r'\s*INSERT\s+(OR\s+\w+\s+)?INTO\s+"?blamequeue_job"?[\s(]', re.I)


def test_enqueue_many_is_one_insert_statement_per_batch(backend: str) -> None:
    db = get_backend(backend).database
    assert db is not None
    with CaptureQueriesContext(connections[db]) as queries:
        queue.enqueue_many("batch", [{"i": i} for i in range(20)], backend=backend)
    inserts = [q["sql"] for q in queries.captured_queries if INSERT_JOB.match(q["sql"])]
    print(
        f"\n[{backend}] enqueue_many of 20: {len(queries.captured_queries)} statements, "
        f"{len(inserts)} insert into blamequeue_job"
    )
    assert len(inserts) == 1


# -- prepared hot statements (PostgreSQL) --------------------------------------------------


def _prepared(db: str) -> list[str]:
    with connections[db].cursor() as cur:
        cur.execute("SELECT statement FROM pg_prepared_statements")
        return [" ".join(r[0].split()) for r in cur.fetchall()]


def _claimed_and_done(alias: str, n: int) -> None:
    backend = get_backend(alias)
    claimed = backend.claim(["prep"], n, 30)
    assert len(claimed) == n
    done = Transition(state=State.DONE)
    acks = [Ack(job_id=c.job_id, token=c.token, transition=done) for c in claimed]
    assert all(r.ok for r in backend.apply_many(acks))


@contextlib.contextmanager
def _claim_result_type_changed() -> Iterator[None]:
    """A column the claim returns changes type (as a migration would), and back after."""
    with connections["postgres"].cursor() as cur:
        cur.execute("ALTER TABLE blamequeue_job ALTER COLUMN name TYPE varchar(300)")
    try:
        yield
    finally:
        with connections["postgres"].cursor() as cur:
            cur.execute("ALTER TABLE blamequeue_job ALTER COLUMN name TYPE varchar(255)")


def test_hot_statements_are_prepared_once_per_connection() -> None:
    """Enqueue, claim and ack run prepared on Django's own connection: the second round
    prepares nothing new, and the claim's plan is generic (planned once)."""
    need_server("postgres")
    queue.enqueue_many("prep", [{"i": i} for i in range(6)], backend="postgres")
    for _ in range(2):
        queue.enqueue("prep", {"one": True}, backend="postgres")
        _claimed_and_done("postgres", 3)
    statements = _prepared("postgres")
    assert sum(s.startswith("INSERT INTO blamequeue_job") for s in statements) == 2  # batch, one
    assert sum(s.startswith("WITH picked AS") for s in statements) == 1
    acks = [s for s in statements if "UPDATE blamequeue_job SET state = CASE" in s]
    assert len(acks) == 1 and acks[0].startswith("WITH v AS MATERIALIZED")
    with connections["postgres"].cursor() as cur:
        cur.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%%WITH picked AS%%'"
        )
        assert cur.fetchone() == (2, 0)


def test_a_single_enqueue_is_converted_for_the_driver_once_per_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """psycopg caches how it turns a statement's ``%s`` into ``$n`` only for statements of at
    most 50 parameters; the enqueue's INSERT leaves the columns NULL in every row out of its
    parameters, so a single enqueue is under that limit and its ≈ 3 kB text is not parsed
    again at every call."""
    need_server("postgres")
    from psycopg import _queries

    assert _queries.MAX_CACHED_STATEMENT_PARAMS == 50  # the limit this test is about
    converted: list[str] = []
    uncached = _queries._query2pg_nocache

    def counting(query: bytes, *args: Any, **kwargs: Any) -> Any:
        converted.append(query.decode()[:40])
        return uncached(query, *args, **kwargs)

    monkeypatch.setattr(_queries, "_query2pg_nocache", counting)
    for i in range(3):
        queue.enqueue("convert", {"i": i}, backend="postgres")
        queue.enqueue("convert", {"i": i}, backend="postgres", priority=5, max_attempts=2)
    assert [q for q in converted if q.startswith("INSERT INTO blamequeue_job")] == []


def test_a_round_is_a_begin_with_the_plan_settings_and_one_statement() -> None:
    """The worker's round (acks and a claim, one transaction) sends the generic plan settings
    with its BEGIN (one round trip), then the acks and the claim as one statement that runs
    on its generic plan: two round trips and the COMMIT, where there were five."""
    need_server("postgres")
    backend = get_backend("postgres")
    queue.enqueue_many("round", [{"i": i} for i in range(6)], backend="postgres")
    claimed = backend.claim(["round"], 2, 30)
    done = Transition(state=State.DONE)
    db = connections["postgres"]
    for _ in range(2):
        acks = [Ack(job_id=c.job_id, token=c.token, transition=done) for c in claimed]
        with CaptureQueriesContext(db) as queries:
            results, claimed = backend.apply_and_claim(acks, ["round"], 2, 30)
        assert [r.ok for r in results] == [True, True] and len(claimed) == 2
        # Django logs its transaction's "BEGIN" and "COMMIT" whatever the driver sends.
        sent = [q["sql"] for q in queries.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]
        assert len(sent) == 2, sent
        assert sent[0].startswith("BEGIN; ") and "force_generic_plan" in sent[0]
        assert "WITH v AS MATERIALIZED" in sent[1] and "picked AS" in sent[1]
    with db.cursor() as cur:
        cur.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%%WITH v AS MATERIALIZED%%picked AS%%'"
        )
        plans = cur.fetchall()
    assert len(plans) == 1 and all(custom == 0 and generic > 0 for generic, custom in plans)


def _jobs_in(queue_name: str) -> dict[str, tuple[str, str | None]]:
    with connections["postgres"].cursor() as cur:
        cur.execute(
            "SELECT id, state, lease_token FROM blamequeue_job WHERE queue = %s", [queue_name]
        )
        return {r[0]: (r[1], r[2]) for r in cur.fetchall()}


def test_a_stale_ack_in_a_round_of_one_statement_changes_nothing_and_the_claim_goes_on() -> None:
    need_server("postgres")
    backend = get_backend("postgres")
    queue.enqueue_many("stale", [{"i": i} for i in range(4)], backend="postgres")
    first, second = backend.claim(["stale"], 2, 30)
    done = Transition(state=State.DONE)
    acks = [
        Ack(job_id=first.job_id, token="not-its-token", transition=done),
        Ack(job_id=second.job_id, token=second.token, transition=done),
    ]
    results, claimed = backend.apply_and_claim(acks, ["stale"], 5, 30)
    assert [(r.job_id, r.ok, r.state) for r in results] == [
        (first.job_id, False, None),
        (second.job_id, True, State.DONE),
    ]
    assert len(claimed) == 2 and {c.job_id for c in claimed}.isdisjoint({first.job_id})
    rows = _jobs_in("stale")
    assert rows[first.job_id] == ("inflight", first.token)  # the fence held
    assert rows[second.job_id] == ("done", None)
    assert all(rows[c.job_id] == ("inflight", c.token) for c in claimed)


def test_a_job_a_round_makes_pending_again_is_claimed_by_the_next_round() -> None:
    """The acks and the claim of a round share one snapshot: a retry due at once is not
    among that round's claimed jobs, and the next round claims it."""
    need_server("postgres")
    backend = get_backend("postgres")
    queue.enqueue_many("again", [{"i": i} for i in range(2)], backend="postgres")
    first, second = backend.claim(["again"], 2, 30)
    retry = Transition(state=State.PENDING, delay=0.0)
    acks = [Ack(job_id=first.job_id, token=first.token, transition=retry)]
    results, claimed = backend.apply_and_claim(acks, ["again"], 5, 30)
    assert [r.state for r in results] == [State.PENDING] and claimed == []
    done = Transition(state=State.DONE)
    acks = [Ack(job_id=second.job_id, token=second.token, transition=done)]
    results, claimed = backend.apply_and_claim(acks, ["again"], 5, 30)
    assert [r.ok for r in results] == [True] and [c.job_id for c in claimed] == [first.job_id]
    assert claimed[0].attempt == 2


@pytest.mark.parametrize(("slow_ms", "onward"), [(0.001, True), (60_000.0, False)])
def test_a_round_of_one_statement_times_its_claim_for_claiming_onward(
    slow_ms: float, onward: bool
) -> None:
    """The statement answers its claim's own time: over ``CLAIM_ONWARD_AFTER_MS`` it turns
    claiming onward on, under it off, as a claim in its own statement does."""
    need_server("postgres")
    from django_blamequeue.backends.jobtable.claim_start import ClaimStart

    backend = get_backend("postgres")
    start = backend.claim_start
    backend.claim_start = ClaimStart(slow_ms)
    try:
        queue.enqueue_many("timed", [{"i": i} for i in range(4)], backend="postgres")
        claimed = backend.claim(["timed"], 1, 30)
        backend.claim_start.full_due_at = 0.0  # the round claims from the start
        done = Transition(state=State.DONE)
        acks = [Ack(job_id=c.job_id, token=c.token, transition=done) for c in claimed]
        results, claimed = backend.apply_and_claim(acks, ["timed"], 1, 30)
        assert [r.ok for r in results] == [True] and len(claimed) == 1
        assert backend.claim_start.onward is onward
        assert backend.claim_start.after["timed"][2] == claimed[0].job_id
    finally:
        backend.claim_start = start


def test_a_round_inside_a_begun_transaction_sets_the_plan_settings_as_a_statement() -> None:
    """Where the transaction has begun already (a statement ran in an enclosing block), the
    settings cannot ride on its BEGIN: they go as a statement of their own, and still hold
    for the round."""
    need_server("postgres")
    backend = get_backend("postgres")
    queue.enqueue_many("begun", [{"i": i} for i in range(4)], backend="postgres")
    claimed = backend.claim(["begun"], 2, 30)
    done = Transition(state=State.DONE)
    acks = [Ack(job_id=c.job_id, token=c.token, transition=done) for c in claimed]
    db = connections["postgres"]
    with transaction.atomic(using="postgres"):
        with db.cursor() as cur:
            cur.execute("SELECT 1")
        with CaptureQueriesContext(db) as queries:
            results, claimed = backend.apply_and_claim(acks, ["begun"], 2, 30)
        with db.cursor() as cur:
            cur.execute("SHOW enable_seqscan")
            assert cur.fetchone() == ("off",)
    sent = [q["sql"] for q in queries.captured_queries if "force_generic_plan" in q["sql"]]
    assert len(sent) == 1 and sent[0].startswith("SELECT set_config")
    assert [r.ok for r in results] == [True, True] and len(claimed) == 2


def test_a_round_whose_session_was_killed_is_an_outage_and_the_next_round_reconnects() -> None:
    """The BEGIN that carries the plan settings meets a lost session first: it fails as
    psycopg fails for one (an outage: ``BACKEND_UNAVAILABLE`` through the breaker, the dead
    connection dropped), not as a refused statement, and the next round goes on a new one."""
    need_server("postgres")
    from django_blamequeue.exceptions import ErrorCode, QueueError

    backend = get_backend("postgres")
    assert backend.resilience is not None
    queue.enqueue_many("killed", [{"i": i} for i in range(4)], backend="postgres")
    claimed = backend.claim(["killed"], 1, 30)
    db = connections["postgres"]
    other = db.get_new_connection(db.get_connection_params())
    try:
        other.execute("SELECT pg_terminate_backend(%s)", [db.connection.info.backend_pid])
    finally:
        other.close()
    done = Transition(state=State.DONE)
    acks = [Ack(job_id=c.job_id, token=c.token, transition=done) for c in claimed]
    with pytest.raises(QueueError) as refused:
        backend.resilience.call(lambda: backend.apply_and_claim(acks, ["killed"], 1, 30))
    assert refused.value.code == ErrorCode.BACKEND_UNAVAILABLE
    results, again = backend.resilience.call(
        lambda: backend.apply_and_claim(acks, ["killed"], 1, 30)
    )
    assert [r.ok for r in results] == [True] and len(again) == 1


def _seq_scans_of_the_job_table(db: str) -> int:
    """Sequential scans of ``blamequeue_job`` so far in the current transaction."""
    return _job_table_stat(db, "seq_scan")


def _rows_read_by_index(db: str) -> int:
    """Rows of ``blamequeue_job`` fetched through an index so far in the transaction."""
    return _job_table_stat(db, "idx_tup_fetch")


def _job_table_stat(db: str, column: str) -> int:
    with connections[db].cursor() as cur:
        cur.execute(
            f"SELECT coalesce({column}, 0) FROM pg_stat_xact_user_tables "
            "WHERE relname = 'blamequeue_job'"
        )
        row = cur.fetchone()
        return int(row[0]) if row else 0


def test_a_claim_planned_on_an_empty_table_never_scans_the_whole_table() -> None:
    """The claim's one generic plan is made at a connection's first claim; made while the
    table looked empty, it must still find its rows by index once done rows pile up (a
    sequential scan per claim grew with the table and starved workers under a backlog)."""
    need_server("postgres")
    with connections["postgres"].cursor() as cur:
        cur.execute("TRUNCATE blamequeue_job")  # no rows and no statistics, as on day one
    assert get_backend("postgres").claim(["prep"], 3, 30) == []  # planned now, on nothing
    queue.enqueue_many("prep", [{"i": i} for i in range(300)], backend="postgres")
    with transaction.atomic(using="postgres"):
        before = _seq_scans_of_the_job_table("postgres")
        assert len(get_backend("postgres").claim(["prep"], 3, 30)) == 3
        assert _seq_scans_of_the_job_table("postgres") == before


def test_a_claim_planned_on_an_analysed_empty_table_reads_only_the_rows_it_claims() -> None:
    """A worker that starts while the table is empty and analysed (retention emptied it,
    autovacuum analysed it) plans its claim on zero rows; once a backlog comes, each claim
    must still read only what it claims: in the claim index's order, updated by key (such a
    plan sorted every pending row of a bitmap scan and joined the claimed ones back by
    reading every row through the primary key: a whole table per claim)."""
    need_server("postgres")
    with connections["postgres"].cursor() as cur:
        cur.execute("DELETE FROM blamequeue_job")
        cur.execute("ANALYZE blamequeue_job")
    connections["postgres"].close()  # a worker starting now: a new connection, a new plan
    assert get_backend("postgres").claim(["prep"], 3, 30) == []  # planned now, on zero rows
    queue.enqueue_many("prep", [{"i": i} for i in range(300)], backend="postgres")
    with transaction.atomic(using="postgres"):
        read = _rows_read_by_index("postgres")
        assert len(get_backend("postgres").claim(["prep"], 3, 30)) == 3
        assert _rows_read_by_index("postgres") - read <= 3 * 3


def test_a_claim_planned_on_a_backlog_never_analysed_reads_only_the_rows_it_claims() -> None:
    """A table with no statistics yet (a fresh install, a backlog enqueued before autovacuum's
    first ANALYZE) makes the planner believe a queue holds one pending job: it read every
    pending job through the smaller (queue, state) index and sorted them to take a few, 13 ms
    a claim of 5 behind 16,000 jobs and growing with the backlog, until autovacuum's ANALYZE.
    A process analyses such a table before its first claim."""
    need_server("postgres")
    with connections["postgres"].cursor() as cur:
        cur.execute("TRUNCATE blamequeue_job")  # no rows and no statistics, as on day one
        cur.execute("DELETE FROM pg_statistic WHERE starelid = 'blamequeue_job'::regclass")
    for _ in range(16):  # the backlog at which the planner took the other index here
        queue.enqueue_many("fresh", [{"i": i} for i in range(1000)], backend="postgres")
    connections["postgres"].close()  # a worker starting now: a new connection, a new plan
    get_backend("postgres").jobtable.statistics_checked = False  # and a process of its own
    with transaction.atomic(using="postgres"):
        read = _rows_read_by_index("postgres")
        assert len(get_backend("postgres").claim(["fresh"], 3, 30)) == 3
        assert _rows_read_by_index("postgres") - read <= 3 * 3


def test_an_ack_planned_on_an_analysed_empty_table_reads_only_the_rows_it_acks() -> None:
    """The batched ack is prepared too, and may be planned while the table looks empty: it
    must still find each acked row by key (such a plan read the whole primary key per ack, or
    the whole index of inflight rows, where every acked job keeps an entry until vacuum)."""
    need_server("postgres")
    with connections["postgres"].cursor() as cur:
        cur.execute("DELETE FROM blamequeue_job")
        cur.execute("ANALYZE blamequeue_job")
    connections["postgres"].close()  # a worker starting now: a new connection, new plans
    queue.enqueue_many("prep", [{"i": i} for i in range(3)], backend="postgres")
    for _ in range(6):  # past the five custom plans PostgreSQL tries before a generic one
        queue.enqueue("prep", {"one": True}, backend="postgres")
        _claimed_and_done("postgres", 1)
    queue.enqueue_many("prep", [{"i": i} for i in range(300)], backend="postgres")
    backend = get_backend("postgres")
    claimed = backend.claim(["prep"], 3, 30)
    done = Transition(state=State.DONE)
    with transaction.atomic(using="postgres"):
        read = index_entries_read("postgres", "blamequeue_job_pkey")
        scans = _seq_scans_of_the_job_table("postgres")
        acks = [Ack(job_id=c.job_id, token=c.token, transition=done) for c in claimed]
        assert all(r.ok for r in backend.apply_many(acks))
        assert index_entries_read("postgres", "blamequeue_job_pkey") - read <= 3 * 3
        assert _seq_scans_of_the_job_table("postgres") == scans


def test_an_enqueue_inside_atomic_is_still_a_row_of_the_callers_transaction() -> None:
    need_server("postgres")
    with pytest.raises(RuntimeError), transaction.atomic(using="postgres"):
        queue.enqueue("prep", {"rolled": "back"}, backend="postgres")
        raise RuntimeError
    assert queue.size("prep", backend="postgres") == 0
    assert _prepared("postgres") == []  # the rollback forgot them, on both sides
    queue.enqueue("prep", {"kept": True}, backend="postgres")
    assert queue.size("prep", backend="postgres") == 1


def test_prepare_false_sends_the_statements_as_django_does(settings: Any) -> None:
    need_server("postgres")
    options = {**settings.BLAMEQUEUE["BACKENDS"]["postgres"], "PREPARE": False}
    settings.BLAMEQUEUE = {
        **settings.BLAMEQUEUE,
        "BACKENDS": {**settings.BLAMEQUEUE["BACKENDS"], "postgres": options},
    }
    assert get_backend("postgres").jobtable.prepares is False
    queue.enqueue_many("prep", [{"i": i} for i in range(3)], backend="postgres")
    _claimed_and_done("postgres", 3)
    assert _prepared("postgres") == []


@pytest.mark.parametrize(
    ("option", "database", "expected"),
    [
        (None, {}, True),
        (False, {}, False),
        (True, {"DISABLE_SERVER_SIDE_CURSORS": True}, True),
        (None, {"DISABLE_SERVER_SIDE_CURSORS": True}, False),
        (None, {"OPTIONS": {"prepare_threshold": None}}, False),
        (None, {"OPTIONS": {"prepare_threshold": 5}}, True),
    ],
)
def test_prepare_is_on_unless_the_database_is_pooled_per_transaction(
    option: bool | None, database: dict[str, Any], expected: bool
) -> None:
    assert prepared.wanted(option, database) is expected


def test_a_claim_whose_prepared_result_type_changed_fails_once_then_prepares_afresh() -> None:
    """``cached plan must not change result type`` after a migration altered a column the
    claim returns: that claim fails (its transaction rolls back, nothing leased), the next
    one prepares the statement again."""
    need_server("postgres")
    queue.enqueue_many("prep", [{"i": i} for i in range(6)], backend="postgres")
    _claimed_and_done("postgres", 2)
    with _claim_result_type_changed():
        with pytest.raises(DatabaseError, match="cached plan must not change result type"):
            _claimed_and_done("postgres", 2)
        assert queue.size("prep", backend="postgres") == 4  # nothing was leased
        _claimed_and_done("postgres", 2)
        _claimed_and_done("postgres", 2)


def test_a_single_enqueue_recovers_from_a_prepared_statement_the_server_lost() -> None:
    """Autocommit (no rollback to clear psycopg's record): the enqueue that meets the lost
    statement prepares it afresh and runs again at once, and every later one goes through
    (psycopg's own queued ``DEALLOCATE ALL`` would drop the fresh one and fail every other
    call)."""
    need_server("postgres")
    queue.enqueue("prep", {"i": 0}, backend="postgres")
    with connections["postgres"].cursor() as cur:
        cur.execute("DEALLOCATE ALL")  # as a pooler's other server session would look
    with CaptureQueriesContext(connections["postgres"]) as queries:
        queue.enqueue("prep", {"i": 1}, backend="postgres")
    assert sum(bool(INSERT_JOB.match(q["sql"])) for q in queries.captured_queries) == 2
    with CaptureQueriesContext(connections["postgres"]) as queries:
        for i in range(2, 7):
            queue.enqueue("prep", {"i": i}, backend="postgres")
    assert sum(bool(INSERT_JOB.match(q["sql"])) for q in queries.captured_queries) == 5
    assert queue.size("prep", backend="postgres") == 7


def test_a_stale_statement_caught_in_a_savepoint_is_prepared_afresh_after_the_commit() -> None:
    """No ROLLBACK clears psycopg's record when the caller rolls back to a savepoint and
    commits: the failed call itself forgets the connection's prepared statements."""
    need_server("postgres")
    queue.enqueue_many("prep", [{"i": i} for i in range(6)], backend="postgres")
    _claimed_and_done("postgres", 2)
    with _claim_result_type_changed():
        stale = pytest.raises(DatabaseError, match="cached plan must not change result type")
        with transaction.atomic(using="postgres"), stale:
            get_backend("postgres").claim(["prep"], 2, 30)  # a savepoint of the outer one
        _claimed_and_done("postgres", 2)
        _claimed_and_done("postgres", 2)  # and the statement prepared afresh stays prepared


# -- autovacuum of the job tables (PostgreSQL) ---------------------------------------------


def test_the_job_tables_are_vacuumed_after_a_fixed_number_of_dead_tuples_on_postgresql() -> None:
    """Migration 0018: the server's default (a fifth of the table dead, throttled) lets a
    table holding a retention window of done rows bloat between two runs."""
    need_server("postgres")
    with connections["postgres"].cursor() as cur:
        cur.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s)",
            [["blamequeue_job", "blamequeue_sqs_job"]],
        )
        options = {name: set(opts or ()) for name, opts in cur.fetchall()}
    wanted = {
        "autovacuum_vacuum_scale_factor=0.0",
        "autovacuum_vacuum_threshold=10000",
        "autovacuum_vacuum_cost_delay=0",
        "autovacuum_analyze_scale_factor=0.02",
    }
    assert options == {"blamequeue_job": wanted, "blamequeue_sqs_job": wanted}


# -- a pinned xmin horizon named by the sweeper (PostgreSQL) -------------------------------


def test_the_sweeper_names_a_transaction_that_holds_back_vacuum_past_its_threshold(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from django_blamequeue.sweeper.horizon import HorizonWatch

    need_server("postgres")
    db = connections["postgres"]
    idle = db.get_new_connection(db.get_connection_params())
    try:
        idle.execute("SELECT txid_current()")  # an xid, then idle in transaction
        (pid,) = idle.execute("SELECT pg_backend_pid()").fetchone()
        assert HorizonWatch("postgres", threshold=3600).run_once() is None
        with caplog.at_level("WARNING", logger="django_blamequeue.sweeper"):
            holder = HorizonWatch("postgres", threshold=0).run_once()
        assert holder is not None and holder.pid == pid
        assert holder.state == "idle in transaction"
        assert f"pid {pid}" in caplog.text and "holds back vacuum" in caplog.text
    finally:
        idle.rollback()
        idle.close()


def test_the_horizon_watch_runs_for_each_database_holding_a_job_table_and_is_quiet_on_sqlite() -> (
    None
):
    from django_blamequeue.sweeper import services_for
    from django_blamequeue.sweeper.horizon import HorizonWatch

    need_server("postgres")
    names = {s.name for s in services_for([get_backend("default"), get_backend("postgres")])}
    assert {"horizon[default]", "horizon[postgres]"} <= names
    assert HorizonWatch("default", threshold=0).run_once() is None  # SQLite has no horizon
