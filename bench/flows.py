#!/usr/bin/env python
"""Parent/child flows on PostgreSQL with 2 worker processes (not a test).

    .venv/bin/python bench/flows.py [--wide 10000] [--parents 1000] [--per-parent 10]
                                    [--concurrency 64] [--no-write] [--pg-stats N]
                                    [--pg-conf LINE ...]

It starts its own PostgreSQL (``tests.servers``, fsync on), creates a fresh database, migrates
and runs two scenarios with ``--workers`` (2) ``manage.py runworker --no-sweep`` processes —
no sweeper, so every report travels the push path: the child's ack records it on the parent's
manifest row, the commit nudges the worker's relay thread, the relay settles the parent:

1. one parent x 10,000 children;
2. 1,000 parents x 10 children (all enqueued in one ``enqueue_many``).

Per scenario, from the database's own timestamps: *fan-out → collect* (the fan-out ack, i.e.
the first manifest row, to the claim that runs ``collect``; for many parents the median and the
worst), *children settled/s* (children whose report is recorded on the parent, from the first
fan-out to the last report), *children run/s* (first child claim to last child ack), and the
CPU the workers and PostgreSQL spent per child. Then, with the workers stopped, *outbox rows/s*:
the relay alone (``Relay().run_once()``, this process) draining 10,000 report rows (the path
of reports for a parent on another backend, and of rescues and cascades). ``--pg-stats N``
prints each scenario's N costliest statements (``pg_stat_statements``).

It prints a table and writes ``docs/benchmarks-flows.md`` (the generated part between the
``bench:begin``/``bench:end`` markers; the prose around them is kept).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MANAGE = ROOT / "testproject" / "manage.py"
DOC = ROOT / "docs" / "benchmarks-flows.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
TARGET = 2_000  # children settled per second, PostgreSQL, 2 worker processes


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cpu_of(pid: int, children: bool = False) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def postgres_cpu(postmaster: int) -> float:
    """The cluster's CPU: the postmaster, the backends it reaped, and the live ones."""
    total = cpu_of(postmaster, children=True)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == postmaster:
                        total += cpu_of(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return total


class Bench:
    def __init__(self, args: argparse.Namespace, url: str, pg_pid: int, logdir: Path) -> None:
        os.environ["BENCH_DATABASE_URL"] = url
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.flow_settings"
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
        self.args = args
        self.pg_pid = pg_pid
        self.logdir = logdir
        self.procs: list[subprocess.Popen[bytes]] = []

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        from django.db import connection

        with connection.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else []

    def reset(self) -> None:
        self.sql(
            "TRUNCATE blamequeue_job, blamequeue_flow_dependency, blamequeue_outbox, "
            "blamequeue_audit"
        )

    @contextmanager
    def workers(self) -> Iterator[None]:
        from bench.flowapp.jobs import CHILDREN, PARENTS

        command = [
            sys.executable,
            str(MANAGE),
            "runworker",
            PARENTS,
            CHILDREN,
            "--no-sweep",
            "--concurrency",
            str(self.args.concurrency),
            "--progress-interval",
            "3600",
        ]
        self.worker_command = shlex.join(["manage.py", *command[2:]])
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.procs = []
        for i in range(self.args.workers):
            out = (self.logdir / f"worker-{i}.log").open("wb")
            self.procs.append(
                subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
            )
        deadline = time.monotonic() + 60
        while not all(
            "runworker" in (self.logdir / f"worker-{i}.log").read_text(errors="replace")
            for i in range(self.args.workers)
        ):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"workers did not start; see {self.logdir}")
            time.sleep(0.1)
        try:
            yield
        finally:
            for p in self.procs:
                p.send_signal(signal.SIGTERM)
            for p in self.procs:
                p.wait(timeout=60)

    def cpu(self) -> tuple[float, float]:
        return sum(cpu_of(p.pid) for p in self.procs), postgres_cpu(self.pg_pid)

    def run(self, name: str, parents: int, per_parent: int) -> dict[str, Any]:
        from bench.flowapp.jobs import PARENTS, Fan

        self.reset()
        self.sql("ANALYZE")
        if self.args.pg_stats:
            self.sql("SELECT pg_stat_statements_reset()")
        cpu0 = self.cpu()
        t0 = time.perf_counter()
        Fan.definition.enqueue_many([{"n": per_parent}] * parents)  # type: ignore[attr-defined]
        deadline = time.monotonic() + self.args.timeout
        while self.unfinished(PARENTS):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: flows not done after {self.args.timeout} s")
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        cpu1 = self.cpu()
        n = parents * per_parent
        per_flow = self.sql("""
            SELECT extract(epoch FROM p.started_at - min(d.created_at)),
                   extract(epoch FROM p.finished_at - p.created_at)
            FROM blamequeue_job p JOIN blamequeue_flow_dependency d ON d.job_id = p.id
            GROUP BY p.id, p.started_at, p.finished_at, p.created_at""")
        to_collect = sorted(float(a) for a, _ in per_flow)
        ((first_fan, last_report, settled),) = self.sql(
            "SELECT min(created_at), max(reported_at), count(*) FILTER (WHERE status = 'done') "
            "FROM blamequeue_flow_dependency"
        )
        ((fan_out_s,),) = self.sql(
            "SELECT extract(epoch FROM max(created_at) - min(created_at)) "
            "FROM blamequeue_flow_dependency"
        )
        ((first_claim, last_ack),) = self.sql(
            "SELECT min(started_at), max(finished_at) FROM blamequeue_job "
            "WHERE parent_id IS NOT NULL"
        )
        result = {
            "parents": parents,
            "children": n,
            "settled": settled,
            "wall_s": wall,
            "fan_out_to_collect_s": statistics.median(to_collect),
            "fan_out_to_collect_max_s": to_collect[-1],
            "fan_out_s": float(fan_out_s),
            "settled_per_s": n / (last_report - first_fan).total_seconds(),
            "run_per_s": n / (last_ack - first_claim).total_seconds(),
            "worker_cpu_us": 1e6 * (cpu1[0] - cpu0[0]) / n,
            "pg_cpu_us": 1e6 * (cpu1[1] - cpu0[1]) / n,
        }
        if settled != n:
            raise RuntimeError(f"{name}: {settled} of {n} children reported")
        if self.args.pg_stats:
            self.print_statements(name, n)
        log(
            f"{name}: fan-out→collect {result['fan_out_to_collect_s']:.2f} s (max "
            f"{result['fan_out_to_collect_max_s']:.2f}), {result['settled_per_s']:,.0f} children "
            f"settled/s, {result['run_per_s']:,.0f} run/s, fan-outs over {fan_out_s:.2f} s, "
            f"wall {wall:.1f} s"
        )
        return result

    def unfinished(self, queue: str) -> bool:
        """Is a job of ``queue`` still to finish? An index probe (``bq_job_queue_state``): the
        poll must not cost PostgreSQL the CPU the workers are measured on."""
        return bool(
            self.sql(
                "SELECT EXISTS (SELECT 1 FROM blamequeue_job WHERE queue = %s "
                "AND state IN ('pending', 'blocked', 'inflight', 'waiting_children'))",
                [queue],
            )[0][0]
        )

    def print_statements(self, name: str, children: int) -> None:
        """The scenario's costliest statements: where PostgreSQL's time per child went."""
        rows = self.sql(
            "SELECT total_exec_time, calls, rows, query FROM pg_stat_statements "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "ORDER BY total_exec_time DESC LIMIT %s",
            [self.args.pg_stats],
        )
        print(f"\n{name}: costliest statements (µs per child, calls, rows, statement)")
        for total_ms, calls, n_rows, query in rows:
            text = " ".join(query.split())
            print(f"{1000 * total_ms / children:8.1f} {calls:7d} {n_rows:8d}  {text[:150]}")

    def plain(self, n: int) -> dict[str, Any]:
        """The same no-op child as plain jobs (no parent): what the worker path costs alone."""
        from bench.flowapp.jobs import CHILDREN, child

        self.reset()
        self.sql("ANALYZE")
        cpu0 = self.cpu()
        for start in range(0, n, 5000):
            child.enqueue_many([None] * min(5000, n - start))
        deadline = time.monotonic() + self.args.timeout
        while self.unfinished(CHILDREN):
            if time.monotonic() > deadline:
                raise RuntimeError(f"plain jobs not done after {self.args.timeout} s")
            time.sleep(0.05)
        cpu1 = self.cpu()
        ((first_claim, last_ack),) = self.sql(
            "SELECT min(started_at), max(finished_at) FROM blamequeue_job"
        )
        result = {
            "jobs": n,
            "run_per_s": n / (last_ack - first_claim).total_seconds(),
            "worker_cpu_us": 1e6 * (cpu1[0] - cpu0[0]) / n,
            "pg_cpu_us": 1e6 * (cpu1[1] - cpu0[1]) / n,
        }
        log(
            f"plain: {n} no-op jobs, {result['run_per_s']:,.0f} run/s, worker CPU "
            f"{result['worker_cpu_us']:,.0f} µs/job, PostgreSQL {result['pg_cpu_us']:,.0f} µs/job"
        )
        return result

    def relay_alone(self, n: int) -> dict[str, Any]:
        """The relay draining ``n`` report rows, with the nudge off."""
        from django.db import transaction

        from bench.flowapp.jobs import CHILDREN, PARENTS, Fan
        from django_blamequeue.backends import get_backend
        from django_blamequeue.core import lifecycle
        from django_blamequeue.core.records import Ack, Transition
        from django_blamequeue.core.states import State
        from django_blamequeue.jobs.flows import build_children
        from django_blamequeue.relay import outbox

        self.reset()
        outbox.nudge = lambda **_: None  # type: ignore[assignment]
        b = get_backend(None)
        Fan.definition.enqueue({"n": n})  # type: ignore[attr-defined]
        [parent] = b.claim([PARENTS], 1, 300)
        kids = build_children(Fan.definition.flow, parent, {"n": n}, b.alias, 5)  # type: ignore[attr-defined]
        b.apply_many(
            [
                Ack(
                    job_id=parent.job_id,
                    token=parent.token,
                    transition=lifecycle.decide(
                        lifecycle.FannedOut(kids),
                        attempt=1,
                        max_attempts=3,
                        policy=lifecycle.Policy(),
                    ),
                )
            ]
        )
        done = Transition(state=State.DONE, yields_to_cancel=False)
        while claimed := b.claim([CHILDREN], 1000, 300):
            b.apply_many([Ack(job_id=c.job_id, token=c.token, transition=done) for c in claimed])
        # The acks recorded the reports on the manifest (same database); to time the relay,
        # undo that and outbox every report, as a rescue, a cascade or the sweeper would.
        self.sql("UPDATE blamequeue_flow_dependency SET status = 'pending', reported_at = NULL")
        children = [r[0] for r in self.sql("SELECT id FROM blamequeue_job WHERE parent_id <> ''")]
        with transaction.atomic():
            b.report_terminal(children)
        rows = self.sql("SELECT count(*) FROM blamequeue_outbox")[0][0]
        t0 = time.perf_counter()
        sent = outbox.Relay().run_once().sent
        seconds = time.perf_counter() - t0
        if sent != rows or rows != n:
            raise RuntimeError(f"relay sent {sent} of {rows} rows ({n} children)")
        log(f"relay alone: {rows} report rows in {seconds:.2f} s: {rows / seconds:,.0f} rows/s")
        return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds}


def machine() -> dict[str, Any]:
    cpu, mem_kb = "", 0
    with open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    with open("/proc/meminfo") as f:
        mem_kb = next((int(ln.split()[1]) for ln in f if ln.startswith("MemTotal:")), 0)
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


def table(report: dict[str, Any]) -> str:
    wide, many, plain = report["wide"], report["many"], report["plain"]
    rows = [
        (
            "measurement",
            f"1 x {wide['children']:,}",
            f"{many['parents']:,} x {many['children'] // many['parents']}",
            f"{plain['jobs']:,} plain jobs",
        )
    ]

    def both(key: str, fmt: str) -> tuple[str, str, str]:
        return (
            fmt.format(wide[key]),
            fmt.format(many[key]),
            fmt.format(plain[key]) if key in plain else "-",
        )

    rows += [
        ("fan-out → collect, median (s)", *both("fan_out_to_collect_s", "{:.2f}")),
        ("fan-out → collect, worst (s)", *both("fan_out_to_collect_max_s", "{:.2f}")),
        ("first → last fan-out (s)", *both("fan_out_s", "{:.2f}")),
        ("children settled / s", *both("settled_per_s", "{:,.0f}")),
        ("children run / s (claim → ack)", *both("run_per_s", "{:,.0f}")),
        ("enqueue → last collect, wall (s)", *both("wall_s", "{:.1f}")),
        ("worker CPU per child (µs)", *both("worker_cpu_us", "{:,.0f}")),
        ("PostgreSQL CPU per child (µs)", *both("pg_cpu_us", "{:,.0f}")),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def write_doc(report: dict[str, Any]) -> None:
    m, relay = report["machine"], report["relay"]
    best = min(report["wide"]["settled_per_s"], report["many"]["settled_per_s"])
    verdict = "met" if best >= TARGET else "**missed**"
    generated = "\n".join(
        [
            BEGIN,
            f"Run {report['finished']}, `{report['command']}` ({report['elapsed_s']:.0f} s).",
            "",
            f"Machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB, Linux {m['kernel']}; "
            f"Python {m['python']}, Django {m['django']}, psycopg {m['psycopg']}, PostgreSQL "
            f"{report['pg_version']} (fsync on). Load average {m['loadavg_start'][0]:.1f} at the "
            "start, "
            f"{m['loadavg_end'][0]:.1f} at the end (other processes share this machine).",
            "",
            f"Workers: {report['workers']} x `{report['worker_command']}`.",
            "",
            table(report),
            "",
            f"Outbox relay alone (this process, workers stopped): {relay['rows']:,} report rows "
            f"in {relay['seconds']:.2f} s = **{relay['rows_per_s']:,.0f} rows/s**.",
            "",
            f"Target ≥ {TARGET:,} children settled/s: {verdict} (slowest scenario {best:,.0f}/s).",
            END,
        ]
    )
    text = DOC.read_text() if DOC.exists() else f"# Flow benchmark\n\n{BEGIN}\n{END}\n"
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOC.write_text(head + generated + tail)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wide", type=int, default=10_000, help="children of the one wide flow")
    parser.add_argument("--parents", type=int, default=1_000)
    parser.add_argument("--per-parent", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--concurrency",
        type=int,
        default=64,
        help="runworker --concurrency (as bench/throughput.py)",
    )
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--no-write", action="store_true", help="print only; leave the doc alone")
    parser.add_argument(
        "--pg-conf",
        action="append",
        default=[],
        metavar="LINE",
        help="a postgresql.conf line for the throwaway server (repeatable), e.g. auto_explain",
    )
    parser.add_argument(
        "--pg-stats",
        type=int,
        default=0,
        metavar="N",
        help="print each scenario's N costliest statements (pg_stat_statements)",
    )
    args = parser.parse_args(argv)
    command = "bench/flows.py " + " ".join(argv if argv is not None else sys.argv[1:])
    report: dict[str, Any] = {
        "command": command.strip(),
        "machine": machine(),
        "workers": args.workers,
    }
    started = time.perf_counter()
    from tests.servers import PostgresServer

    with tempfile.TemporaryDirectory(prefix="bq-bench-flows-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)  # the PostgreSQL user must traverse it when running as root
        (base / "logs").mkdir()
        stats = ["shared_preload_libraries = 'pg_stat_statements'"] if args.pg_stats else []
        server = PostgresServer(base / "pg", extra_config=[*stats, *args.pg_conf])
        log("PostgreSQL: starting a throwaway server (fsync on)")
        server.start()
        try:
            import psycopg

            with psycopg.connect(server.url, autocommit=True) as conn:
                conn.execute("CREATE DATABASE bench_flows")
                report["pg_version"] = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
            if args.pg_stats:
                with psycopg.connect(
                    server.url.rsplit("/", 1)[0] + "/bench_flows", autocommit=True
                ) as conn:
                    conn.execute("CREATE EXTENSION pg_stat_statements")
            bench = Bench(
                args, server.url.rsplit("/", 1)[0] + "/bench_flows", server.pid, base / "logs"
            )
            with bench.workers():
                report["wide"] = bench.run(f"1 x {args.wide:,}", 1, args.wide)
                report["many"] = bench.run(
                    f"{args.parents:,} x {args.per_parent}", args.parents, args.per_parent
                )
                report["plain"] = bench.plain(args.wide)
            report["worker_command"] = bench.worker_command
            report["relay"] = bench.relay_alone(args.wide)
        finally:
            server.stop()
    report["elapsed_s"] = time.perf_counter() - started
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["finished"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print()
    print(table(report))
    print(f"\nrelay alone: {report['relay']['rows_per_s']:,.0f} outbox rows/s")
    if not args.no_write:
        write_doc(report)
        log(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
