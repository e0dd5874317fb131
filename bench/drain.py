"""What ``bench/orm.py``, ``bench/ceiling.py`` and ``bench/soak.py`` share (not a script).

- ``Cluster``: one throwaway PostgreSQL 15 (``tests.servers``, fsync on, 127.0.0.1, a free high
  port), with ``pg_stat_statements`` preloaded when asked, and its databases.
- ``setup_django``: Django set up in *this* process on one of those databases (the driver
  enqueues with the library's public API and reads the job rows back through it).
- ``Workers``: ``manage.py runworker`` processes started together and stopped by their pids.
- ``Drain``: one timed drain of the jobs already enqueued: a progress line while it runs,
  then jobs/s from the first claim to the last ack as the database stamped them (so process
  start-up is not counted), CPU per job of the workers and of the server, and connections
  opened per job (``pg_stat_database.sessions``). Optionally py-spy on one worker and the
  costliest statements (``bench/profiling.py``).
"""

from __future__ import annotations

import os
import resource
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from bench.throughput import MANAGE, ROOT, children_cpu, machine, postgres_cpu

QUEUE = "bench"


def children_usage() -> dict[str, float]:
    """User and system CPU seconds and context switches of the reaped children so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"user": r.ru_utime, "sys": r.ru_stime, "switches": r.ru_nvcsw + r.ru_nivcsw}


def logger(prefix: str) -> Callable[[str], None]:
    def log(message: str) -> None:
        print(f"[{prefix} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    return log


# ------------------------------------------------------------------------ server and Django
class Cluster:
    """A throwaway PostgreSQL under ``base``; ``with Cluster(...) as pg:`` starts and stops it."""

    def __init__(self, base: Path, *, stats: bool = False, conf: Sequence[str] = ()) -> None:
        from tests.servers import PostgresServer

        preload = (
            [
                "shared_preload_libraries = 'pg_stat_statements'",
                "pg_stat_statements.track_planning = on",
            ]
            if stats
            else []
        )
        self.stats = stats
        self.server = PostgresServer(base / "pg", extra_config=[*preload, *conf])

    def __enter__(self) -> Cluster:
        self.server.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.stop()

    @property
    def pid(self) -> int | None:
        return self.server.pid

    def url(self, database: str) -> str:
        return self.server.url.rsplit("/", 1)[0] + "/" + database

    def create_database(self, name: str) -> str:
        """``CREATE DATABASE name`` (with ``pg_stat_statements`` when asked); its URL."""
        import psycopg

        with psycopg.connect(self.server.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        if self.stats:
            with psycopg.connect(self.url(name), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION pg_stat_statements")
        return self.url(name)

    def facts(self) -> dict[str, str]:
        import psycopg

        with psycopg.connect(self.server.url, autocommit=True) as conn:
            return {
                k: str(conn.execute(f"SHOW {k}").fetchone()[0])  # type: ignore[index]
                for k in (
                    "server_version",
                    "fsync",
                    "synchronous_commit",
                    "wal_sync_method",
                    "shared_buffers",
                )
            }


def report_head(script: str, argv: Sequence[str] | None, args: Any) -> dict[str, Any]:
    """The start of a script's JSON report: how it was run, with which options, on what."""
    return {
        "command": f"bench/{script} " + " ".join(argv if argv is not None else sys.argv[1:]),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": machine(),
    }


def setup_django(url: str, settings: str) -> None:
    """Django in this process on ``url`` with ``settings``; migrated."""
    os.environ["BENCH_DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = settings
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def sql(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(statement, params)
        return cur.fetchall() if cur.description else []


def alter(statements: Sequence[str]) -> None:
    """Run ``--alter`` statements after the migration: a lever tried on the schema (a
    ``fillfactor``, a dropped index) without touching the package."""
    for statement in statements:
        sql(statement)


def reset_jobs() -> None:
    sql("TRUNCATE blamequeue_job, blamequeue_audit, blamequeue_flow_dependency")


def done_count() -> int:
    return int(sql("SELECT count(*) FROM blamequeue_job WHERE state = 'done'")[0][0])


def table_stats(table: str = "blamequeue_job") -> dict[str, int]:
    """Counters of the server so far: WAL bytes written, and ``table``'s inserted, updated
    and HOT-updated rows (a HOT update adds no index entries; any update that changes an
    indexed column, such as ``state``, cannot be one)."""
    ((wal, ins, upd, hot),) = sql(
        "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, coalesce(n_tup_ins, 0), "
        "coalesce(n_tup_upd, 0), coalesce(n_tup_hot_upd, 0) FROM pg_stat_user_tables "
        "WHERE relname = %s",
        [table],
    )
    return {"wal_bytes": int(wal), "inserted": ins, "updated": upd, "hot_updated": hot}


def stats_delta(before: dict[str, int], after: dict[str, int], jobs: int) -> dict[str, float]:
    d = {k: after[k] - before[k] for k in before}
    return {
        "wal_bytes_per_job": d["wal_bytes"] / jobs,
        "updates_per_job": d["updated"] / jobs,
        "hot_update_share": d["hot_updated"] / d["updated"] if d["updated"] else 0.0,
    }


def sessions() -> int:
    """Sessions opened on this database so far (PostgreSQL 14+), the driver's included."""
    return int(
        sql("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")[0][0]
    )


def enqueue_bulk(name: str, n: int, batch: int = 1000, payload: str = "i") -> None:
    """``n`` jobs ``name`` in ``queue.enqueue_many`` calls of ``batch``, payload ``{"i": k}``."""
    from django_blamequeue import queue

    for start in range(0, n, batch):
        queue.enqueue_many(
            QUEUE, [{payload: k} for k in range(start, min(n, start + batch))], name=name
        )


# ------------------------------------------------------------------------ workers
class Workers:
    """``count`` × ``manage.py runworker bench --no-sweep [--concurrency K] [--burst]``.

    ``concurrency=None`` leaves the flag out: the command's own default. ``env`` is added to
    this process's environment (settings module, ``BENCH_CONN_MAX_AGE`` …). ``code``: the
    checkout the workers import the package from (default: this one), to run another commit's
    workers against the same server in the same run.
    """

    def __init__(
        self,
        count: int,
        *,
        concurrency: int | None,
        burst: bool,
        env: dict[str, str],
        logdir: Path,
        tag: str,
        sweep: bool = False,
        extra: Sequence[str] = (),
        code: Path | None = None,
    ) -> None:
        # ``code``: the checkout whose code the workers run (a before/after comparison).
        code = (code or ROOT).resolve()
        self.command = [sys.executable, str(code / MANAGE.relative_to(ROOT)), "runworker", QUEUE]
        if not sweep:
            self.command.append("--no-sweep")
        if concurrency is not None:
            self.command += ["--concurrency", str(concurrency)]
        self.command += ["--progress-interval", "3600", *extra]
        if burst:
            self.command.append("--burst")
        self.count = count
        self.code = code
        self.burst = burst
        self.env = {**os.environ, **env, "PYTHONPATH": str(code)}
        self.logdir = logdir
        self.tag = tag
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def shown(self) -> str:
        """The command as the reports print it."""
        return shlex.join(["manage.py", *self.command[2:]])

    def log_path(self, i: int) -> Path:
        return self.logdir / f"{self.tag}-{i}.log"

    def __enter__(self) -> Workers:
        for i in range(self.count):
            with self.log_path(i).open("wb") as out:
                self.procs.append(
                    subprocess.Popen(
                        self.command,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=self.env,
                        cwd=self.code,
                    )
                )
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop(timeout=60 if e is None else 10)

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM each live worker by pid, SIGKILL past ``timeout``; raise on a bad exit."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        bad = [p.returncode for p in self.procs if p.returncode not in (0, -signal.SIGTERM)]
        if bad:
            raise RuntimeError(f"{self.tag}: workers exited with {bad}; see {self.logdir}")

    def banner_value(self, key: str) -> str | None:
        """A row of the first worker's start-up banner (``concurrency`` …), if it printed one."""
        try:
            text = self.log_path(0).read_text(errors="replace")
        except OSError:
            return None
        for line in text.splitlines():
            words = line.strip(" │|").split()
            if len(words) >= 2 and words[0] == key:
                return words[1]
        return None


# ------------------------------------------------------------------------ one drain
class Drain:
    """Times one drain of ``n`` jobs already enqueued by ``workers`` (burst mode)."""

    def __init__(
        self,
        n: int,
        workers: Workers,
        *,
        pg_pid: int | None,
        log: Callable[[str], None],
        startup_cpu: float = 0.0,
        timeout: float = 1800,
        every: float = 2.0,
        py_spy: Path | None = None,
        pg_stats: int = 0,
    ) -> None:
        self.n = n
        self.workers = workers
        self.pg_pid = pg_pid
        self.log = log
        self.startup_cpu = startup_cpu
        self.timeout = timeout
        self.every = every
        self.py_spy = py_spy
        self.pg_stats = pg_stats

    def run(self) -> dict[str, Any]:
        from bench import profiling

        sql("ANALYZE")  # what autovacuum would have done by then: claims planned from stats
        if self.pg_stats:
            sql("SELECT pg_stat_statements_reset()")
        sessions0, stats0 = sessions(), table_stats()
        cpu0, pg0, t0 = children_cpu(), postgres_cpu(self.pg_pid), time.perf_counter()
        usage0 = children_usage()
        spy = profiling.Spy(self.py_spy, self.workers.tag)
        with self.workers as w:
            self._progress(w, t0, lambda done: spy.start(w.procs[0].pid, done))
        recorded = spy.stop()
        wall = time.perf_counter() - t0
        cpu = children_cpu() - cpu0 - self.workers.count * self.startup_cpu
        usage = {k: v - usage0[k] for k, v in children_usage().items()}
        pg = postgres_cpu(self.pg_pid) - pg0
        opened = sessions() - sessions0
        time.sleep(0.6)  # the exited backends' table counters reach the statistics
        stats1 = table_stats()
        counts = dict(sql("SELECT state, count(*) FROM blamequeue_job GROUP BY state"))
        if counts.get("done") != self.n or len(counts) != 1:
            raise RuntimeError(f"{self.workers.tag}: drain of {self.n} left {counts}")
        ((jobs, first, last, claims, acks, attempts),) = sql(
            "SELECT count(*), min(started_at), max(finished_at), count(DISTINCT started_at), "
            "count(DISTINCT finished_at), max(attempts) FROM blamequeue_job WHERE state = 'done'"
        )
        seconds = (last - first).total_seconds()
        out: dict[str, Any] = {
            "jobs": jobs,
            "seconds": seconds,
            "rate": jobs / seconds if seconds > 0 else float("inf"),
            "wall": wall,
            "procs": self.workers.count,
            "command": self.workers.shown,
            "concurrency_banner": self.workers.banner_value("concurrency"),
            "claim_batch": jobs / max(claims, 1),
            "ack_batch": jobs / max(acks, 1),
            "max_attempts": attempts,
            "worker_cpu_us": 1e6 * cpu / jobs,
            # Start-up included in these three (a few ms against seconds of drain):
            "worker_user_us": 1e6 * usage["user"] / jobs,
            "worker_sys_us": 1e6 * usage["sys"] / jobs,
            "worker_switches_per_job": usage["switches"] / jobs,
            "pg_cpu_us": 1e6 * pg / jobs if self.pg_pid else None,
            "sessions": opened,
            "sessions_per_job": opened / jobs,
            **stats_delta(stats0, stats1, jobs),
        }
        if recorded is not None:
            share = (jobs - spy.done_at_start) / self.workers.count  # worker 0's, about
            out["py_spy"] = profiling.summarize(recorded, share)
        if self.pg_stats:
            out["pg_statements"] = profiling.statements(self.pg_stats, jobs)
        self.log(
            f"{self.workers.tag}: {jobs:,} jobs in {seconds:.2f} s = {out['rate']:,.0f}/s "
            f"(worker CPU {out['worker_cpu_us']:,.0f} µs/job [user {out['worker_user_us']:,.0f}, "
            f"sys {out['worker_sys_us']:,.0f}, {out['worker_switches_per_job']:.1f} context "
            "switches], server "
            f"{out['pg_cpu_us'] or 0:,.0f} µs/job, {out['sessions_per_job']:.2f} connections/job, "
            f"{out['wal_bytes_per_job']:,.0f} WAL bytes/job, "
            f"{100 * out['hot_update_share']:.0f} % HOT updates; "
            f"claims of {out['claim_batch']:.1f}, acks of {out['ack_batch']:.1f})"
        )
        return out

    def _progress(self, w: Workers, t0: float, started: Callable[[int], None]) -> None:
        """Wait for the burst workers to exit, printing done jobs and the recent rate;
        ``started(done)`` once the first worker printed its banner (start-up is over)."""
        deadline = time.monotonic() + self.timeout
        last_t, last_done, ready = t0, 0, False
        while w.running():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{w.tag}: not drained after {self.timeout:.0f} s")
            if not ready:
                time.sleep(0.05)
                if w.banner_value("concurrency") is None:
                    continue
                ready = True
                started(done_count())
            time.sleep(self.every)
            now, done = time.perf_counter(), done_count()
            self.log(
                f"{w.tag}: {done:,}/{self.n:,} done, "
                f"{(done - last_done) / (now - last_t):,.0f}/s over the last {now - last_t:.1f} s"
            )
            last_t, last_done = now, done


def startup_cpu(
    concurrency: int | None, env: dict[str, str], logdir: Path, cache: dict[Any, float]
) -> float:
    """CPU seconds one burst worker spends starting and stopping on an empty queue (cached per
    concurrency), subtracted from a drain's worker CPU so that CPU per job counts the jobs."""
    if concurrency not in cache:
        reset_jobs()
        cpu0 = children_cpu()
        with Workers(
            1, concurrency=concurrency, burst=True, env=env, logdir=logdir, tag="startup"
        ) as w:
            while w.running():
                time.sleep(0.05)
        cache[concurrency] = children_cpu() - cpu0
    return cache[concurrency]


def text_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain table, first column left-aligned, the others right-aligned."""
    cells = [[str(c) for c in r] for r in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths), *map(line, cells[1:])])
