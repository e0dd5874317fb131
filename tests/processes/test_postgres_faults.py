"""PostgreSQL going away under running workers: a server restart, and connections terminated
mid-job. Workers recover on their own (no restart), LISTEN comes back, nothing is lost."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from django_blamequeue import queue
from django_blamequeue.models import Job
from tests.procapp.jobs import QUEUE
from tests.servers import PostgresServer
from tests.settings import TMP

from .conftest import Processes, Report, count, effects, redeliveries, states, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]
postgres_only = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

LISTENING = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND query ILIKE 'LISTEN%%'"
)


class Remote:
    """Queries against a server the pytest process has no Django connection to."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: Any = None

    def one(self, sql: str) -> Any:
        """The first column of the first row, or None while the server is unreachable."""
        import psycopg

        try:
            if self.conn is None:
                self.conn = psycopg.connect(self.url, connect_timeout=2, autocommit=True)
            cur = self.conn.execute(sql)
            row = cur.fetchone() if cur.description else None
        except psycopg.OperationalError:
            self.close()
            return None
        return row[0] if row else None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def done(self) -> int:
        n = self.one(
            f"SELECT count(*) FROM blamequeue_job WHERE queue = '{QUEUE}' AND state = 'done'"
        )
        return -1 if n is None else int(n)


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL of this test's own, so restarting it leaves the shared one alone.

    Its data lives under the repository's .tmp/, not pytest's tmp_path: as root the server
    runs as another user, and a pytest session starting meanwhile makes its temporary root
    private again (0700), which would lock the server out of its own files.
    """
    base = Path(tempfile.mkdtemp(prefix="pg-restart-", dir=TMP))
    server = PostgresServer(base)
    server.start()
    try:
        yield server
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(base, ignore_errors=True)


@postgres_only
def test_workers_recover_from_a_postgres_restart_at_40_percent(
    backend: str, own_postgres: PostgresServer, processes: Processes, report: Report
) -> None:
    n_jobs = 2_000
    env = {"BLAMEQUEUE_TEST_POSTGRES_URL": own_postgres.url}
    server = Remote(own_postgres.url)
    server.one("CREATE DATABASE test_blamequeue")
    server.close()
    db = Remote(own_postgres.url.rsplit("/", 1)[0] + "/test_blamequeue")
    processes.run("migrate", "--database", "postgres", "--noinput", "-v", "0", extra_env=env)
    processes.run(
        "procapp",
        "enqueue",
        "--backend",
        "postgres",
        "--count",
        str(n_jobs),
        "--max-attempts",
        "100",
        extra_env=env,
    )
    # --poll 10: waiting a poll interval would show; a re-established LISTEN wakes at once.
    args = ("--concurrency", "4", "--poll", "10")
    workers = [
        processes.worker("postgres", *args, extra_env=env, overrides={"SWEEP_INTERVAL": 1})
        for _ in range(2)
    ]
    try:
        wait_for(lambda: db.done() >= n_jobs * 0.4, 60, "40 % done", interval=0.02)
        at = db.done()
        began = time.monotonic()
        own_postgres.restart()
        down = time.monotonic() - began
        up: list[Any] = []

        def reconnected() -> bool:
            up.append(db.one("SELECT statement_timestamp()"))
            return up[-1] is not None

        wait_for(reconnected, 10, "a connection to the restarted server")
        up_at = up[-1]
        recovered = wait_for(
            lambda: db.one(f"SELECT count(*) FROM blamequeue_job WHERE finished_at > '{up_at}'"),
            60,
            "the first job done after the restart",
        )
        wait_for(lambda: db.done() == n_jobs, 90, "all jobs done after the restart")
        drained = time.monotonic() - began
        relisten = wait_for(lambda: db.one(LISTENING) == len(workers), 30, "LISTEN again")
        processes.run("procapp", "enqueue", "--backend", "postgres", "--count", "1", extra_env=env)
        wait_for(lambda: db.done() == n_jobs + 1, 10, "a job enqueued after the recovery")
        latency = db.one(
            "SELECT extract(epoch FROM max(started_at - created_at)) FROM blamequeue_job "
            "WHERE started_at = (SELECT max(started_at) FROM blamequeue_job)"
        )
        lost = n_jobs + 1 - db.done()
        effects_n = db.one("SELECT count(*) FROM procapp_sideeffect")
        again = db.one("SELECT count(*) FROM procapp_redelivery")
        retried = db.one("SELECT count(*) FROM blamequeue_job WHERE attempts > 1")
        warned = processes.stderr_count("LISTEN connection lost")
        report(
            "pg-restart[postgres]",
            jobs=n_jobs,
            restarted_at=f"{at} done",
            down=f"{down:.1f} s",
            first_job_done_after=f"{recovered:.1f} s",
            drained_after=f"{drained:.1f} s",
            listen_back_after=f"{relisten:.1f} s",
            wake_latency_after=f"{float(latency) * 1000:.0f} ms",
            lost=lost,
            jobs_retried=retried,
            done_twice=again,
            listen_lost_warnings=warned,
        )
        assert lost == 0 and effects_n == n_jobs + 1 and again == 0
        assert float(latency) < 2.0, "woken by polling (every 10 s), not by LISTEN"
        assert all(w.alive() for w in workers), processes.tails()
        assert all(w.stop() == 0 for w in workers)
    finally:
        processes.kill_all()
        db.close()


def terminate_worker_connections() -> int:
    """Terminate every other session on the test database: the worker's, all of them."""
    with connections["postgres"].cursor() as cur:
        cur.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'"
        )
        n: int = cur.fetchone()[0]
        return n


@postgres_only
def test_a_worker_survives_pg_terminate_backend_mid_job(
    backend: str, processes: Processes, report: Report
) -> None:
    n_jobs = 200
    queue.enqueue_many(
        QUEUE, [{"sleep": 0.05}] * n_jobs, name="procapp.effect", backend=backend, max_attempts=10
    )
    worker = processes.worker(backend, "--concurrency", "4", "--poll", "5")
    terminated: list[int] = []
    for share in (0.2, 0.5, 0.8):

        def mid_job(share: float = share) -> bool:
            return count(backend, "done") >= n_jobs * share and count(backend, "inflight") > 0

        wait_for(mid_job, 60, f"{share:.0%} done, jobs in flight")
        terminated.append(terminate_worker_connections())
    wait_for(lambda: count(backend, "done") == n_jobs, 60, "all jobs done")
    relisten = wait_for(lambda: listening() == 1, 30, "the worker to LISTEN again")
    retried = Job.objects.using(backend).filter(queue=QUEUE, attempts__gt=1).count()
    report(
        "pg-terminate[postgres]",
        jobs=n_jobs,
        connections_terminated="+".join(map(str, terminated)) + " mid-job",
        lost=n_jobs - effects(backend),
        jobs_retried=retried,
        done_twice=len(redeliveries(backend)),
        worker="survived",
        listen_back_after=f"{relisten:.1f} s",
    )
    assert all(n >= 2 for n in terminated), terminated  # at least the claimer and the listener
    assert states(backend) == {"done": n_jobs} and effects(backend) == n_jobs
    assert redeliveries(backend) == []
    assert worker.alive() and worker.stop() == 0


def listening() -> int:
    with connections["postgres"].cursor() as cur:
        cur.execute(LISTENING.replace("%%", "%"))
        n: int = cur.fetchone()[0]
        return n
