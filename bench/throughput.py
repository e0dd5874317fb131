#!/usr/bin/env python
"""Throughput and latency of the local backend on SQLite and PostgreSQL (not a test).

    .venv/bin/python bench/throughput.py [--n 20000] [--db sqlite|postgres|both] [--quick]

It starts its own PostgreSQL (``tests.servers``, fsync on) in a temporary directory, creates a
fresh database (and a fresh SQLite file), migrates, and measures with no-op jobs:

1. single enqueues, one ``queue.enqueue`` (one transaction) after the other, from one thread,
   and the same from ``--producers`` threads at once;
2. ``queue.enqueue_many`` in batches of ``--batch``;
3. a drain of N jobs by 1 and by 2 ``manage.py runworker --burst --no-sweep --concurrency K``
   processes: jobs/s from the first claim to the last ack, as the database recorded them
   (``min(started_at)`` .. ``max(finished_at)``), so process start-up is not counted; also the
   CPU the workers and the PostgreSQL server spent per job;
4. enqueue→start latency with idle workers (LISTEN/NOTIFY on PostgreSQL, polling on SQLite):
   jobs enqueued one at a time at a steady pace, latency = ``started_at - created_at``;
5. PostgreSQL only: the drain rate with a 1,000,000-job backlog (rows made with
   ``INSERT … SELECT generate_series``) against a 10,000-job backlog made the same way.

It prints a table, writes ``bench/results/latest.json``, the generated part of
``docs/benchmarks.md`` (between the ``bench:begin``/``bench:end`` markers; the prose around
them is kept) and ``docs/img/throughput.png``.

Each database runs in a child process of this script (``--child``), because Django's
settings (``bench/settings.py``, database from ``BENCH_DATABASE_URL``) are fixed per process.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MANAGE = ROOT / "testproject" / "manage.py"
DOC = ROOT / "docs" / "benchmarks.md"
PLOT = ROOT / "docs" / "img" / "throughput.png"
RESULTS = ROOT / "bench" / "results" / "latest.json"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"

#: The issue's targets (PostgreSQL, this machine): key -> (label, minimum or maximum, unit).
TARGETS: dict[str, tuple[str, str, float]] = {
    "drain_2": ("no-op drain, 2 worker processes", ">=", 4000),
    "enqueue_many": ("enqueue_many", ">=", 20000),
    "single": ("single enqueues", ">=", 900),
    "latency_p50": ("p50 enqueue→start, idle workers on LISTEN/NOTIFY", "<=", 10),
    "backlog_ratio": ("drain at a 1,000,000 backlog / at 10,000", ">=", 0.80),
}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------ CPU accounting
def _proc_cpu(pid: int, children: bool) -> float:
    """utime+stime of ``pid`` (plus its reaped children's if ``children``), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def postgres_cpu(postmaster: int | None) -> float:
    """CPU of one PostgreSQL cluster: the postmaster with every backend it reaped, plus the
    live ones (backends that exited are in the postmaster's children's times)."""
    if not postmaster:
        return 0.0
    total = _proc_cpu(postmaster, children=True)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == postmaster:
                total += _proc_cpu(int(entry), children=False)
        except (OSError, ValueError, IndexError):
            continue
    return total


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# ============================================================================ child side
class Child:
    """Runs every measurement on the database of ``BENCH_DATABASE_URL``."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        call_command("migrate", verbosity=0, interactive=False)
        self.cfg = cfg
        self.connection = connection
        self.vendor: str = connection.vendor
        self.postmaster = int(os.environ.get("BENCH_PG_PID") or 0) or None
        self.logdir = Path(cfg["logdir"])
        self.result: dict[str, Any] = {"vendor": self.vendor}
        self._startup_cpu: float | None = None

    # -- helpers -------------------------------------------------------------------------
    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.connection.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else []

    def reset(self) -> None:
        tables = "blamequeue_job, blamequeue_audit, blamequeue_flow_dependency"
        if self.vendor == "postgresql":
            self.sql(f"TRUNCATE {tables}")
        else:
            for table in tables.split(", "):
                self.sql(f"DELETE FROM {table}")
            self.sql("VACUUM")

    def analyze(self) -> None:
        # What autovacuum would have done by then; both vendors plan the claim from stats.
        self.sql("ANALYZE blamequeue_job" if self.vendor == "postgresql" else "ANALYZE")

    def counts(self) -> dict[str, int]:
        from django.db.models import Count

        from django_blamequeue.models import Job

        rows = Job.objects.order_by().values_list("state").annotate(n=Count("id"))
        return {state: n for state, n in rows}

    def done_count(self) -> int:
        return int(self.sql("SELECT count(*) FROM blamequeue_job WHERE state = 'done'")[0][0])

    def wait_for(
        self, check: Callable[[], bool], timeout: float, what: str, every: float = 0.2
    ) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(every)

    @contextmanager
    def workers(
        self, count: int, *, burst: bool, tag: str
    ) -> Iterator[list[subprocess.Popen[bytes]]]:
        """``count`` runworker processes; on exit waits for them (burst) or SIGTERMs them."""
        from bench.jobs import QUEUE

        command = [
            sys.executable,
            str(MANAGE),
            "runworker",
            QUEUE,
            "--no-sweep",
            "--concurrency",
            str(self.cfg["concurrency"]),
            "--progress-interval",
            "3600",
        ]
        if burst:
            command.append("--burst")
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings"}
        procs = []
        for i in range(count):
            out = (self.logdir / f"{self.vendor}-{tag}-{i}.log").open("wb")
            procs.append(
                subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
            )
        self.worker_command = shlex.join(["manage.py", *command[2:]])
        try:
            yield procs
        finally:
            for p in procs:
                if not burst and p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=self.cfg["drain_timeout"])
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                    raise RuntimeError(
                        f"worker {p.pid} did not finish; see {self.logdir}"
                    ) from None
            bad = [p.returncode for p in procs if p.returncode not in (0, -signal.SIGTERM)]
            if bad:
                raise RuntimeError(f"workers exited with {bad}; see {self.logdir}")

    def drain_window(self) -> dict[str, Any]:
        """Rate of the done jobs from the first claim to the last ack, and the batch sizes
        (one claim statement stamps one started_at, one ack batch one finished_at)."""
        from django.db.models import Count, Max, Min

        from django_blamequeue.models import Job

        agg = Job.objects.filter(state="done").aggregate(
            n=Count("id"),
            first=Min("started_at"),
            last=Max("finished_at"),
            claims=Count("started_at", distinct=True),
            acks=Count("finished_at", distinct=True),
            max_attempts=Max("attempts"),
        )
        seconds = (agg["last"] - agg["first"]).total_seconds()
        return {
            "jobs": agg["n"],
            "seconds": seconds,
            "rate": agg["n"] / seconds if seconds > 0 else float("inf"),
            "claim_batch": agg["n"] / max(agg["claims"], 1),
            "ack_batch": agg["n"] / max(agg["acks"], 1),
            "max_attempts": agg["max_attempts"],
        }

    def startup_cpu(self) -> float:
        """CPU seconds one burst worker spends starting and stopping on an empty queue."""
        if self._startup_cpu is None:
            self.reset()
            cpu0 = children_cpu()
            with self.workers(1, burst=True, tag="startup"):
                pass
            self._startup_cpu = children_cpu() - cpu0
            self.result["worker_startup_cpu_s"] = self._startup_cpu
        return self._startup_cpu

    def _startup_cpu_or_zero(self) -> float:
        return self._startup_cpu or 0.0

    def measure_drain(self, workers: int, n: int, tag: str) -> dict[str, Any]:
        self.analyze()
        cpu0, pg0, t0 = children_cpu(), postgres_cpu(self.postmaster), time.perf_counter()
        with self.workers(workers, burst=True, tag=tag):
            pass
        wall = time.perf_counter() - t0
        cpu = children_cpu() - cpu0 - workers * self._startup_cpu_or_zero()
        pg = postgres_cpu(self.postmaster) - pg0
        counts = self.counts()
        if counts.get("done") != n or len(counts) != 1:
            raise RuntimeError(f"drain of {n} left {counts}")
        window = self.drain_window()
        window.update(
            wall=wall,
            workers=workers,
            worker_cpu_us=1e6 * cpu / n,
            pg_cpu_us=1e6 * pg / n if self.postmaster else None,
        )
        log(
            f"{self.vendor}: drain {n} with {workers} worker(s): {window['rate']:,.0f} jobs/s "
            f"(claims of {window['claim_batch']:.1f}, acks of {window['ack_batch']:.1f}; "
            f"worker CPU {window['worker_cpu_us']:.0f} µs/job)"
        )
        return window

    # -- measurements --------------------------------------------------------------------
    def single(self) -> None:
        from bench.jobs import NOOP, QUEUE
        from django_blamequeue import queue

        n = self.cfg["single_n"]
        self.reset()
        t0 = time.perf_counter()
        for i in range(n):
            queue.enqueue(QUEUE, {"i": i}, name=NOOP)
        rate = n / (time.perf_counter() - t0)
        self.result["single"] = {"jobs": n, "rate": rate}
        log(f"{self.vendor}: {n} single enqueues: {rate:,.0f} jobs/s")

        producers = self.cfg["producers"]
        self.reset()
        per = n // producers
        barrier = threading.Barrier(producers + 1)
        errors: list[BaseException] = []

        def produce(k: int) -> None:
            from django.db import connections

            try:
                barrier.wait()
                for i in range(per):
                    queue.enqueue(QUEUE, {"p": k, "i": i}, name=NOOP)
            except BaseException as exc:  # reported below
                errors.append(exc)
            finally:
                connections.close_all()

        threads = [threading.Thread(target=produce, args=(k,)) for k in range(producers)]
        for t in threads:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - t0
        if errors:
            raise errors[0]
        rate = per * producers / seconds
        self.result["single_parallel"] = {
            "jobs": per * producers,
            "producers": producers,
            "rate": rate,
        }
        log(
            f"{self.vendor}: {per * producers} single enqueues from {producers} threads: "
            f"{rate:,.0f} jobs/s"
        )

    def many_and_drains(self) -> None:
        from bench.jobs import NOOP, QUEUE
        from django_blamequeue import queue

        n, batch = self.cfg["n"], self.cfg["batch"]
        self.startup_cpu()
        spent = 0.0
        for workers in (1, 2):
            self.reset()
            t0 = time.perf_counter()
            for start in range(0, n, batch):
                queue.enqueue_many(
                    QUEUE, [{"i": i} for i in range(start, min(n, start + batch))], name=NOOP
                )
            spent += time.perf_counter() - t0
            self.result[f"drain_{workers}"] = self.measure_drain(workers, n, f"drain{workers}")
        self.result["enqueue_many"] = {"jobs": 2 * n, "batch": batch, "rate": 2 * n / spent}
        log(f"{self.vendor}: enqueue_many in batches of {batch}: {2 * n / spent:,.0f} jobs/s")

    def latency_rows(self, ids: list[str]) -> list[tuple[datetime, datetime]]:
        """(created_at, started_at) of these jobs."""
        from django_blamequeue.models import Job

        return list(Job.objects.filter(id__in=ids).values_list("created_at", "started_at"))

    def latency(self) -> None:
        from bench.jobs import NOOP, QUEUE
        from django_blamequeue import queue

        count, interval = self.cfg["latency_jobs"], self.cfg["latency_interval"]
        self.reset()
        with self.workers(2, burst=False, tag="latency"):
            for i in range(20):  # warm-up: workers up, connected, LISTENing
                queue.enqueue(QUEUE, {"warm": i}, name=NOOP)
            self.wait_for(lambda: self.done_count() == 20, 120, "the warm-up jobs")
            time.sleep(1.5)  # idle: blocked on LISTEN (PostgreSQL) or polling (SQLite)
            ids = []
            next_at = time.perf_counter()
            for i in range(count):
                ids.append(queue.enqueue(QUEUE, {"i": i}, name=NOOP).job_id)
                next_at += interval
                time.sleep(max(0.0, next_at - time.perf_counter()))
            self.wait_for(lambda: self.done_count() == 20 + count, 120, "the latency jobs")
        ms = sorted((s - c).total_seconds() * 1000 for c, s in self.latency_rows(ids))
        q = statistics.quantiles(ms, n=100, method="inclusive")
        self.result["latency"] = {
            "jobs": count,
            "interval_ms": interval * 1000,
            "p50": q[49],
            "p90": q[89],
            "p99": q[98],
            "max": ms[-1],
            "min": ms[0],
            "samples": ms,
        }
        log(f"{self.vendor}: enqueue→start p50 {q[49]:.1f} ms, p99 {q[98]:.1f} ms")

    def fill(self, count: int) -> float:
        """``count`` pending no-op jobs in one INSERT … SELECT generate_series (PostgreSQL)."""
        from bench.jobs import NOOP, QUEUE

        t0 = time.perf_counter()
        with self.connection.cursor() as cur:
            cur.execute(
                """
                INSERT INTO blamequeue_job (
                    id, queue, name, state, payload, content_type, content_encoding, priority,
                    available_at, attempts, max_attempts, stalls, cancel_requested, progress,
                    trace_id, flow_depth, snoozes, created_at, updated_at, unique_calls)
                SELECT 'BENCH' || lpad(g::text, 21, '0'), %s, %s, 'pending',
                       convert_to('{"i": ' || g || '}', 'UTF8'), 'application/json', 'utf-8', 0,
                       s.t, 0, 3, 0, false, 0, md5(g::text), 0, 0, s.t, s.t, 0
                FROM generate_series(1, %s) AS g,
                     (SELECT statement_timestamp() - interval '1 minute' AS t) AS s
                """,
                [QUEUE, NOOP, count],
            )
        self.sql("VACUUM ANALYZE blamequeue_job")  # autocommit: outside any transaction
        return time.perf_counter() - t0

    def backlog(self) -> None:
        big, sample, small = (
            self.cfg["backlog"],
            self.cfg["backlog_sample"],
            self.cfg["backlog_small"],
        )
        out: dict[str, Any] = {"big": big, "small": small}
        self.reset()
        out["fill_small_s"] = self.fill(small)
        cpu0, t0 = children_cpu(), time.perf_counter()
        with self.workers(2, burst=True, tag="backlog-small"):
            pass
        if self.done_count() != small:
            raise RuntimeError(f"backlog drain of {small} left {self.counts()}")
        out["small_drain"] = self.drain_window()
        out["small_drain"]["worker_cpu_us"] = (
            1e6 * (children_cpu() - cpu0 - 2 * self._startup_cpu_or_zero()) / small
        )
        out["small_drain"]["wall"] = time.perf_counter() - t0
        self.reset()
        log(f"{self.vendor}: making a backlog of {big:,} jobs")
        out["fill_big_s"] = self.fill(big)
        log(f"{self.vendor}: backlog made in {out['fill_big_s']:.1f} s; draining {sample:,} of it")
        cpu0 = children_cpu()
        with self.workers(2, burst=False, tag="backlog-big"):
            self.wait_for(
                lambda: self.done_count() >= sample,
                self.cfg["drain_timeout"],
                f"{sample} jobs of the backlog",
                every=0.5,
            )
        out["big_drain"] = self.drain_window()
        out["big_drain"]["worker_cpu_us"] = (
            1e6
            * (children_cpu() - cpu0 - 2 * self._startup_cpu_or_zero())
            / out["big_drain"]["jobs"]
        )
        out["ratio"] = out["big_drain"]["rate"] / out["small_drain"]["rate"]
        plan = self.sql("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + self._claim_probe())
        out["claim_plan"] = [r[0] for r in plan]
        self.result["backlog"] = out
        log(
            f"{self.vendor}: drain at {small:,}: {out['small_drain']['rate']:,.0f}/s; at "
            f"{big:,}: {out['big_drain']['rate']:,.0f}/s (ratio {out['ratio']:.2f})"
        )
        self.reset()

    @staticmethod
    def _claim_probe() -> str:
        # The row selection of the claim for one queue (sql.claim_postgresql runs one such
        # scan per queue); run in autocommit, its row locks end with the statement.
        return (
            "SELECT id FROM blamequeue_job WHERE state = 'pending' AND queue IN ('bench') "
            "AND available_at <= statement_timestamp() ORDER BY priority DESC, available_at, id "
            "LIMIT 100 FOR UPDATE SKIP LOCKED"
        )

    def describe_server(self) -> None:
        self.result["server_version"] = (
            self.sql("SHOW server_version")[0][0]
            if self.vendor == "postgresql"
            else sqlite3.sqlite_version
        )
        if self.vendor == "postgresql":
            self.result["settings"] = {
                k: self.sql(f"SHOW {k}")[0][0]
                for k in ("fsync", "synchronous_commit", "wal_sync_method", "shared_buffers")
            }
        else:
            self.result["settings"] = {
                "journal_mode": self.sql("PRAGMA journal_mode")[0][0],
                "synchronous": self.sql("PRAGMA synchronous")[0][0],
            }

    def run(self) -> dict[str, Any]:
        self.describe_server()
        phases = self.cfg["phases"]
        if "single" in phases:
            self.single()
        if "drain" in phases:
            self.many_and_drains()
        if "latency" in phases:
            self.latency()
        if "backlog" in phases and self.vendor == "postgresql" and self.cfg["backlog"]:
            self.backlog()
        return self.result


def child_main(cfg: dict[str, Any]) -> int:
    if os.environ.get("BENCH_REDIS_URL"):
        from bench.redis_child import RedisChild

        result = RedisChild(cfg).run()
    else:
        result = Child(cfg).run()
    print("RESULT " + json.dumps(result, default=str), flush=True)
    return 0


# ======================================================================== driver side
def fsync_latency(directory: Path, count: int = 300) -> float:
    """Milliseconds per 8 kB append + fdatasync, the way WAL is written (a preallocated
    16 MB segment, written sequentially), on the disk of PostgreSQL's data directory."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        block = b"\x01" * 8192
        os.pwrite(fd, b"\0" * (16 << 20), 0)
        os.fsync(fd)
        t0 = time.perf_counter()
        for i in range(count):
            os.pwrite(fd, block, i * 8192)
            os.fdatasync(fd)
        return 1000 * (time.perf_counter() - t0) / count
    finally:
        os.close(fd)
        path.unlink()


def insert_commit_rate(url: str, count: int = 1000) -> float:
    """One INSERT + COMMIT after the other with plain psycopg: the floor of a single enqueue."""
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE bench_probe (id serial PRIMARY KEY, v text)")
        conn.commit()
        t0 = time.perf_counter()
        for _ in range(count):
            conn.execute("INSERT INTO bench_probe (v) VALUES ('x')")
            conn.commit()
        rate = count / (time.perf_counter() - t0)
        conn.execute("DROP TABLE bench_probe")
        conn.commit()
    return rate


def machine() -> dict[str, Any]:
    mem_kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    import django
    import psycopg

    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "django": django.get_version(),
        "psycopg": psycopg.__version__,
        "kernel": platform.release(),
        "loadavg_start": os.getloadavg(),
    }


def run_child(
    db: str,
    url: str,
    cfg: dict[str, Any],
    pg_pid: int | None,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    env = {
        **os.environ,
        "BENCH_DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        **(extra_env or {}),
    }
    if pg_pid:
        env["BENCH_PG_PID"] = str(pg_pid)
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(cfg)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(
            f"the {db} run failed (exit {proc.returncode}); worker logs in {cfg['logdir']}"
        )
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


def fmt_rate(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def get(d: dict[str, Any] | None, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def rows_of(results: dict[str, dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(measurement, SQLite, PostgreSQL, PostgreSQL target) table rows."""
    s, p = results.get("sqlite"), results.get("postgres")

    def both(*path: str, f: Callable[[Any], str] = fmt_rate) -> tuple[str, str]:
        a, b = get(s, *path), get(p, *path)
        return ("—" if a is None else f(a)), ("—" if b is None else f(b))

    def cpu(path: str) -> tuple[str, str]:
        def one(r: dict[str, Any] | None) -> str:
            w, g = get(r, path, "worker_cpu_us"), get(r, path, "pg_cpu_us")
            if w is None:
                return "—"
            return f"{w:,.0f}" + (f" + {g:,.0f}" if g is not None else "")

        return one(s), one(p)

    ms = lambda v: f"{v:.1f}"  # noqa: E731
    batch = lambda v: f"{v:.1f}"  # noqa: E731
    producers = (
        get(s, "single_parallel", "producers") or get(p, "single_parallel", "producers") or "N"
    )
    rows = [
        ("single enqueue, 1 thread (jobs/s)", *both("single", "rate"), "≥ 900"),
        (f"single enqueue, {producers} threads (jobs/s)", *both("single_parallel", "rate"), ""),
        ("enqueue_many (jobs/s)", *both("enqueue_many", "rate"), "≥ 20,000"),
        ("drain, 1 worker process (jobs/s)", *both("drain_1", "rate"), ""),
        ("drain, 2 worker processes (jobs/s)", *both("drain_2", "rate"), "≥ 4,000"),
        (
            "  claim / ack batch, 2 workers (jobs)",
            *(
                f"{a} / {b}" if a != "—" else a
                for a, b in zip(
                    both("drain_2", "claim_batch", f=batch),
                    both("drain_2", "ack_batch", f=batch),
                    strict=False,
                )
            ),
            "",
        ),
        ("  CPU per job, 2 workers: workers + server (µs)", *cpu("drain_2"), ""),
        ("enqueue→start p50, idle workers (ms)", *both("latency", "p50", f=ms), "≤ 10"),
        ("enqueue→start p99, idle workers (ms)", *both("latency", "p99", f=ms), ""),
    ]
    if get(p, "backlog"):
        b = p["backlog"]  # type: ignore[index]
        rows += [
            (
                f"drain at a {b['small']:,} backlog, 2 workers (jobs/s)",
                "—",
                fmt_rate(b["small_drain"]["rate"]),
                "",
            ),
            (
                f"drain at a {b['big']:,} backlog, 2 workers (jobs/s)",
                "—",
                fmt_rate(b["big_drain"]["rate"]),
                "",
            ),
            ("  ratio big / small", "—", f"{b['ratio']:.2f}", "≥ 0.80"),
        ]
    return rows


def target_rows(results: dict[str, dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    p = results.get("postgres")
    values = {
        "drain_2": get(p, "drain_2", "rate"),
        "enqueue_many": get(p, "enqueue_many", "rate"),
        "single": get(p, "single", "rate"),
        "latency_p50": get(p, "latency", "p50"),
        "backlog_ratio": get(p, "backlog", "ratio"),
    }
    out = []
    for key, (label, op, goal) in TARGETS.items():
        v = values[key]
        if v is None:
            out.append((label, f"{op} {goal:g}", "not measured", ""))
            continue
        met = v >= goal if op == ">=" else v <= goal
        shown = (
            f"{v:.2f}"
            if key == "backlog_ratio"
            else (f"{v:.1f}" if key == "latency_p50" else f"{v:,.0f}")
        )
        if met:
            verdict = "met"
        elif op == ">=":
            verdict = f"missed by {100 * (goal - v) / goal:.0f} % ({v / goal:.2f}× the target)"
        else:
            verdict = f"missed by {v - goal:.1f} ({v / goal:.1f}× the target)"
        out.append((label, f"{op} {goal:,g}", shown, verdict))
    return out


def markdown_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def text_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(r):
        return "  ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=False))
        )

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def generated_section(report: dict[str, Any]) -> str:
    m, results, cfg = report["machine"], report["results"], report["config"]
    p, s = results.get("postgres", {}), results.get("sqlite", {})
    lines = [
        BEGIN,
        f"<!-- written by bench/throughput.py on {report['finished']}; "
        "edit outside the markers -->",
        "",
        f"Run of {report['finished']} (`{report['command']}`, {report['elapsed_s']:.0f} s).",
        "",
        f"- Machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB memory, Linux "
        f"{m['kernel']}; load average {m['loadavg_start'][0]:.1f} at the start and "
        f"{m['loadavg_end'][0]:.1f} at the end (other processes share this machine).",
        f"- Python {m['python']}, Django {m['django']}, psycopg {m['psycopg']}.",
    ]
    if p:
        st = p["settings"]
        lines.append(
            f"- PostgreSQL {p['server_version']} (fsync={st['fsync']}, "
            f"synchronous_commit={st['synchronous_commit']}, "
            f"wal_sync_method={st['wal_sync_method']}, "
            f"shared_buffers={st['shared_buffers']}), started by `tests.servers` on loopback. "
            f"One 8 kB write + fdatasync on its disk: {report['fsync_ms']:.2f} ms; one INSERT + "
            f"COMMIT with plain psycopg: {report['insert_commit_rate']:,.0f}/s."
        )
    if s:
        st = s["settings"]
        lines.append(
            f"- SQLite {s['server_version']} (journal_mode={st['journal_mode']}, synchronous="
            f"{st['synchronous']}, IMMEDIATE write transactions, as `testproject` configures it)."
        )
    default_command = (
        f"manage.py runworker bench --no-sweep --concurrency {cfg['concurrency']} --burst"
    )
    lines += [
        f"- N = {cfg['n']:,} jobs per drain and per enqueue run; single enqueues: "
        f"{cfg['single_n']:,}; enqueue_many batches of {cfg['batch']:,}; workers: "
        f"`{report.get('worker_command', default_command)}`; "
        f"latency: {cfg['latency_jobs']} jobs one every {cfg['latency_interval'] * 1000:g} ms "
        "with 2 idle worker processes.",
        "",
        markdown_table(
            ("measurement", "SQLite", "PostgreSQL", "target (PostgreSQL)"), rows_of(results)
        ),
        "",
        "CPU per job: CPU time of the worker processes, less what one worker spends starting and "
        "stopping on an empty queue, and (PostgreSQL) of the whole server, divided by the jobs "
        "drained. Claim / ack batch: jobs per claim statement / per ack statement.",
        "",
        "Against the targets of the issue (PostgreSQL):",
        "",
        markdown_table(("target", "goal", "measured", "verdict"), target_rows(results)),
        "",
        "![Throughput and latency](img/throughput.png)",
        "",
    ]
    plan = get(p, "backlog", "claim_plan")
    if plan:
        left_pending = p["backlog"]["big"] - p["backlog"]["big_drain"]["jobs"]
        lines += [
            f"The claim's row selection with {left_pending:,} "
            "jobs still pending (`EXPLAIN (ANALYZE, BUFFERS)` after the backlog run):",
            "",
            "```",
            *plan,
            "```",
            "",
        ]
    lines.append(END)
    return "\n".join(lines)


SKELETON = """# Benchmarks

`bench/throughput.py` measures the local backend on SQLite and PostgreSQL. Run it with

    make bench                                  # = .venv/bin/python bench/throughput.py
    .venv/bin/python bench/throughput.py --quick

{generated}
"""


def write_doc(report: dict[str, Any]) -> None:
    section = generated_section(report)
    if DOC.exists() and BEGIN in (text := DOC.read_text()) and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        DOC.write_text(head + section + tail)
    else:
        DOC.parent.mkdir(parents=True, exist_ok=True)
        DOC.write_text(SKELETON.format(generated=section))


def write_plot(report: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = report["results"]
    bars = [
        ("single\n1 thread", ("single", "rate"), 900),
        (f"single\n{report['config']['producers']} threads", ("single_parallel", "rate"), None),
        ("enqueue_many", ("enqueue_many", "rate"), 20000),
        ("drain\n1 worker", ("drain_1", "rate"), None),
        ("drain\n2 workers", ("drain_2", "rate"), 4000),
        ("drain at\n10k backlog", ("backlog", "small_drain", "rate"), None),
        ("drain at\n1M backlog", ("backlog", "big_drain", "rate"), None),
    ]
    fig, (ax, lx) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [2.2, 1]})
    width = 0.38
    colors = {"sqlite": "#6a9fd4", "postgres": "#2f5d8a"}
    for k, db in enumerate(("sqlite", "postgres")):
        if db not in results:
            continue
        xs, ys = [], []
        for i, (_, path, _) in enumerate(bars):
            v = get(results[db], *path)
            if v is not None:
                xs.append(i + (k - 0.5) * width)
                ys.append(v)
        rects = ax.bar(
            xs, ys, width, label="SQLite" if db == "sqlite" else "PostgreSQL", color=colors[db]
        )
        ax.bar_label(rects, labels=[f"{y:,.0f}" for y in ys], fontsize=7, padding=2)
    for i, (_, _, goal) in enumerate(bars):
        if goal:
            ax.hlines(goal, i - 0.45, i + 0.45, colors="#c0392b", linestyles="--", linewidth=1.5)
    ax.plot([], [], color="#c0392b", linestyle="--", label="target (PostgreSQL)")
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("jobs/s (log scale)")
    ax.set_title("Throughput, no-op jobs")
    ax.legend(fontsize=8, loc="upper left")
    for db in ("sqlite", "postgres"):
        ms = get(results.get(db), "latency", "samples")
        if ms:
            ms = sorted(ms)
            lx.plot(
                ms,
                [100 * (i + 1) / len(ms) for i in range(len(ms))],
                label=("SQLite (polling)" if db == "sqlite" else "PostgreSQL (LISTEN/NOTIFY)"),
                color=colors[db],
            )
    lx.axvline(10, color="#c0392b", linestyle="--", linewidth=1.5, label="p50 target 10 ms")
    lx.axhline(50, color="#999", linewidth=0.8)
    lx.set_xscale("log")
    lx.set_xlabel("enqueue→start latency (ms, log scale)")
    lx.set_ylabel("% of jobs")
    lx.set_title("Latency with idle workers")
    lx.legend(fontsize=8, loc="lower right")
    fig.suptitle(
        f"django-blamequeue local backend · {report['machine']['nproc']} CPUs · "
        f"{report['finished']}",
        fontsize=10,
    )
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--n", type=int, default=None, help="jobs per drain / enqueue run (default 20000)"
    )
    parser.add_argument(
        "--db",
        choices=("sqlite", "postgres", "redis", "both", "all"),
        default="both",
        help="both = sqlite and postgres; all = those and redis",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small N, a 100,000 backlog (under 2 minutes)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=64, help="runworker --concurrency (default 64)"
    )
    parser.add_argument("--batch", type=int, default=1000, help="enqueue_many batch size")
    parser.add_argument(
        "--producers", type=int, default=8, help="threads for the parallel single enqueues"
    )
    parser.add_argument(
        "--backlog", type=int, default=None, help="big backlog (default 1,000,000; 0 skips)"
    )
    parser.add_argument(
        "--phases",
        default="single,drain,latency,backlog",
        help="comma-separated subset of single,drain,latency,backlog",
    )
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument("--child", metavar="CONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(json.loads(args.child))

    n = args.n or (2000 if args.quick else 20000)
    backlog = args.backlog if args.backlog is not None else (100_000 if args.quick else 1_000_000)
    cfg: dict[str, Any] = {
        "n": n,
        "single_n": min(n, 2000) if args.quick else n,
        "batch": args.batch,
        "concurrency": args.concurrency,
        "producers": args.producers,
        "latency_jobs": 200 if args.quick else 500,
        "latency_interval": 0.02,
        "backlog": backlog,
        "backlog_sample": min(backlog // 10, 10_000 if args.quick else 40_000),
        "backlog_small": 10_000,
        "drain_timeout": 600,
        "phases": args.phases.split(","),
    }
    command = "bench/throughput.py " + " ".join(argv if argv is not None else sys.argv[1:])
    report: dict[str, Any] = {
        "command": command.strip(),
        "config": cfg,
        "machine": machine(),
        "results": {},
    }
    started = time.perf_counter()
    dbs = {"both": ["sqlite", "postgres"], "all": ["sqlite", "postgres", "redis"]}.get(
        args.db, [args.db]
    )
    with tempfile.TemporaryDirectory(prefix="bq-bench-") as tmp:
        base = Path(tmp)
        cfg["logdir"] = str(base / "logs")
        Path(cfg["logdir"]).mkdir()
        # The base dir must be traversable by the PostgreSQL user when running as root.
        base.chmod(0o755)
        if "sqlite" in dbs:
            log("SQLite: fresh database file")
            report["results"]["sqlite"] = run_child(
                "sqlite", f"sqlite:///{base / 'bench.sqlite3'}", cfg, None
            )
        if "postgres" in dbs:
            from tests.servers import PostgresServer

            server = PostgresServer(base / "pg")
            log("PostgreSQL: starting a throwaway server (fsync on)")
            server.start()
            try:
                import psycopg

                with psycopg.connect(server.url, autocommit=True) as conn:
                    conn.execute("CREATE DATABASE bench")
                url = server.url.rsplit("/", 1)[0] + "/bench"
                report["fsync_ms"] = fsync_latency(server.data_dir)
                report["insert_commit_rate"] = insert_commit_rate(url)
                log(
                    f"PostgreSQL: fdatasync {report['fsync_ms']:.2f} ms; INSERT+COMMIT "
                    f"{report['insert_commit_rate']:,.0f}/s"
                )
                report["results"]["postgres"] = run_child("postgres", url, cfg, server.pid)
            finally:
                server.stop()
        if "redis" in dbs:
            from bench.redis_child import run_redis

            report["results"]["redis"] = run_redis(base, cfg, run_child)
    report["elapsed_s"] = time.perf_counter() - started
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["finished"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    report["worker_command"] = (
        f"manage.py runworker bench --no-sweep --concurrency {cfg['concurrency']} --burst"
    )
    local = {k: v for k, v in report["results"].items() if k != "redis"}
    if "redis" in report["results"]:
        from bench import redis_child

        print()
        print(redis_child.text_report(report, text_table))
        if not args.no_write:
            redis_child.write(report, markdown_table)
            print(f"\nwrote the Redis part of {DOC.relative_to(ROOT)}, {redis_child.RESULTS}")
        if not local:
            return 0
    report["results"] = local
    print()
    print(
        text_table(
            ("measurement", "SQLite", "PostgreSQL", "target (PG)"), rows_of(report["results"])
        )
    )
    print()
    print(text_table(("target", "goal", "measured", "verdict"), target_rows(report["results"])))
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(report, indent=1, default=str) + "\n")
        write_doc(report)
        write_plot(report)
        print(
            f"\nwrote {DOC.relative_to(ROOT)}, {PLOT.relative_to(ROOT)}, "
            f"{RESULTS.relative_to(ROOT)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
