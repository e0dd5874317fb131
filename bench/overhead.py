#!/usr/bin/env python
"""The queue's cost on real jobs: ORM jobs through ``runworker`` against a plain thread pool
(not a test).

    .venv/bin/python bench/overhead.py [--n 10000] [--rounds 3] [--workers 2] [--concurrency 10]
                                       [--baseline DIR] [--py-spy DIR] [--pg-stats N] [--no-write]

The same work on the same throwaway PostgreSQL 15 (fsync on, loopback), Django's default
database settings (``CONN_MAX_AGE=0``, ``bench.orm_settings``): ``bench.ormapp.work.read_write``
reads one ``Account`` by primary key and inserts one ``Entry`` (autocommit). Each round runs,
in an order rotated every round:

- **queue**: N jobs enqueued with ``queue.enqueue_many``, drained by ``--workers`` ×
  ``manage.py runworker bench --no-sweep --concurrency K --burst`` (``bench/orm.py``'s drain:
  first claim to last ack as the rows record them);
- **queue (baseline)**, with ``--baseline DIR``: the same, the workers importing the package
  from the checkout in DIR (e.g. a worktree of ``main``), so before and after share the run;
- **threads**: ``--workers`` processes × K threads of plain Python, no queue: each thread calls
  ``read_write(i)`` for its share of the N values of ``i``, timed from the moment every process
  was ready (Django set up, threads started) to the last thread's end. Each thread's connection
  is Django's thread-local one, opened by its first query and kept to the thread's end: that is
  what Django does in a thread that serves no request (``CONN_MAX_AGE`` is applied only by the
  request signals), and what the worker's slots do too (``worker/slot_db.py``). A thread pool
  that closed its connection per item would pay a connection per job and flatter the queue.

Prints every round, the ratio queue ÷ threads per round and its median (goal ≥ 85 %), CPU per
job of the processes and of the server, and the load average; ``bench/results/overhead.json``
unless ``--no-write``. ``--py-spy`` and ``--pg-stats`` profile the queue side
(``bench/profiling.py``) and, for ``--pg-stats``, the threads side too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import drain, orm, profiling  # noqa: E402
from bench.throughput import postgres_cpu  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "overhead.json"
GOAL = 0.85

log = drain.logger("overhead")


# ------------------------------------------------------------------------ the thread pool
def thread_child(first: int, n: int, step: int, threads: int) -> int:
    """One process of the threads side: ``i`` in ``range(first, n, step)`` over ``threads``
    threads; prints ``ready``, waits for a line on stdin, prints its figures as JSON."""
    import django

    django.setup()
    from django.db import connection

    from bench.ormapp.work import read_write

    mine = list(range(first, n, step))
    go = threading.Event()
    ends: list[float] = []

    def work(share: list[int]) -> None:
        go.wait()
        for i in share:
            read_write(i)
        ends.append(time.time())
        connection.close()  # after its work: the thread is done (untimed)

    pool = [threading.Thread(target=work, args=(mine[t::threads],)) for t in range(threads)]
    for t in pool:
        t.start()
    print("ready", flush=True)
    sys.stdin.readline()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.time()
    go.set()
    for t in pool:
        t.join()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    figures = {
        "start": start,
        "end": max(ends),
        "cpu": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
        "sys": r1.ru_stime - r0.ru_stime,
        "switches": r1.ru_nvcsw + r1.ru_nivcsw - r0.ru_nvcsw - r0.ru_nivcsw,
    }
    print(json.dumps(figures), flush=True)
    return 0


def threads_side(args: argparse.Namespace, pg: drain.Cluster, tag: str) -> dict[str, Any]:
    from bench.ormapp import work

    work.reset()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": orm.SETTINGS,
        "BENCH_CONN_MAX_AGE": "0",
        "PYTHONPATH": str(ROOT),
    }
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--thread-child",
                f"{k},{args.n},{args.workers}",
                "--concurrency",
                str(args.concurrency),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=ROOT,
            text=True,
        )
        for k in range(args.workers)
    ]
    for p in procs:  # every process set up and its threads started
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    if args.pg_stats:
        drain.sql("SELECT pg_stat_statements_reset()")
    pg0 = postgres_cpu(pg.pid)
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    figures = []
    for p in procs:
        out, _ = p.communicate(timeout=args.timeout)
        if p.returncode != 0:
            raise RuntimeError(f"{tag}: a thread process exited with {p.returncode}")
        figures.append(json.loads(out.strip().splitlines()[-1]))
    server = postgres_cpu(pg.pid) - pg0
    written = work.entries()
    if written != args.n:
        raise RuntimeError(f"{tag}: {written} entries written for {args.n} items")
    seconds = max(f["end"] for f in figures) - min(f["start"] for f in figures)
    result: dict[str, Any] = {
        "jobs": args.n,
        "seconds": seconds,
        "rate": args.n / seconds,
        "worker_cpu_us": 1e6 * sum(f["cpu"] for f in figures) / args.n,
        "worker_sys_us": 1e6 * sum(f["sys"] for f in figures) / args.n,
        "worker_switches_per_job": sum(f["switches"] for f in figures) / args.n,
        "pg_cpu_us": 1e6 * server / args.n,
        "loadavg": os.getloadavg(),
    }
    if args.pg_stats:
        result["pg_statements"] = profiling.statements(args.pg_stats, args.n)
    log(
        f"{tag}: {args.n:,} items in {seconds:.2f} s = {result['rate']:,.0f}/s "
        f"(process CPU {result['worker_cpu_us']:,.0f} µs/item [sys "
        f"{result['worker_sys_us']:,.0f}], "
        f"{result['worker_switches_per_job']:.1f} context switches, server "
        f"{result['pg_cpu_us']:,.0f} µs/item)"
    )
    return result


# ------------------------------------------------------------------------ the run
def sides(args: argparse.Namespace) -> list[dict[str, Any]]:
    queue = {"concurrency": args.concurrency, "conn_max_age": "0", "pool": False}
    out = [{**queue, "key": "queue", "label": "queue (this checkout)"}]
    if args.baseline:
        out.append(
            {**queue, "key": "baseline", "label": f"queue ({args.baseline})", "code": args.baseline}
        )
    out.append({"key": "threads", "label": "plain threads, no queue"})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[2],
    )
    parser.add_argument("--n", type=int, default=10000, help="jobs (and items) per side (10000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, order rotated (3)")
    parser.add_argument("--workers", type=int, default=2, help="processes per side (2)")
    parser.add_argument("--concurrency", type=int, default=10, help="slots / threads each (10)")
    parser.add_argument(
        "--baseline", type=Path, default=None, metavar="DIR", help="also workers from DIR"
    )
    parser.add_argument("--batch", type=int, default=1000, help="enqueue_many batch size")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per side")
    parser.add_argument("--py-spy", type=Path, default=None, metavar="DIR")
    parser.add_argument("--pg-stats", type=int, default=0, metavar="N")
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.name}")
    parser.add_argument("--thread-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.thread_child:
        first, n, step = (int(x) for x in args.thread_child.split(","))
        return thread_child(first, n, step, args.concurrency)

    plan = sides(args)
    report: dict[str, Any] = {
        **drain.report_head("overhead.py", argv, args),
        "sides": [{**s, "runs": []} for s in plan],
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bq-bench-overhead-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)  # the PostgreSQL user must traverse it when this runs as root
        logdir = base / "logs"
        logdir.mkdir()
        log("starting a throwaway PostgreSQL (fsync on)")
        with drain.Cluster(base, stats=bool(args.pg_stats)) as pg:
            url = pg.create_database("bench")
            report["server"] = pg.facts()
            drain.setup_django(url, orm.SETTINGS)
            from bench.ormapp import work

            work.seed()
            startups: dict[Any, float] = {}
            for r in range(args.rounds):
                k = r % len(plan)
                for s in report["sides"][k:] + report["sides"][:k]:
                    tag = f"{s['key']}-r{r + 1}"
                    log(
                        f"round {r + 1}/{args.rounds}: {s['label']} (load {os.getloadavg()[0]:.1f})"
                    )
                    if s["key"] == "threads":
                        s["runs"].append(threads_side(args, pg, tag))
                    else:
                        s["runs"].append(orm.run_setup(s, args, pg.pid, logdir, tag, startups))
    report["elapsed_s"] = time.perf_counter() - started
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["finished"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    summarize(report)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(report, indent=1, default=str) + "\n")
        print(f"\nwrote {RESULTS.relative_to(ROOT)}")
    return 0


def summarize(report: dict[str, Any]) -> None:
    by = {s["key"]: s for s in report["sides"]}
    for s in report["sides"]:
        for r in s["runs"]:
            profiling.print_profile(s["label"], r)
    threads = by["threads"]["runs"]
    rows = []
    for s in report["sides"]:
        ratios = [q["rate"] / t["rate"] for q, t in zip(s["runs"], threads, strict=True)]
        s["ratios"] = ratios
        rows.append(
            (
                s["label"],
                " · ".join(f"{r['rate']:,.0f}" for r in s["runs"]),
                " · ".join(f"{100 * x:.0f} %" for x in ratios),
                f"{100 * statistics.median(ratios):.0f} %",
                " · ".join(
                    f"{r['worker_cpu_us']:,.0f} + {r['pg_cpu_us'] or 0:,.0f}" for r in s["runs"]
                ),
                " · ".join(f"{r['claim_batch']:.1f}" for r in s["runs"] if "claim_batch" in r)
                or "-",
                " · ".join(f"{r['loadavg'][0]:.1f}" for r in s["runs"]),
            )
        )
    m, srv, cfg = report["machine"], report["server"], report["config"]
    print(
        f"\nORM work (read one row, write one row), N = {cfg['n']:,}, {cfg['workers']} processes × "
        f"{cfg['concurrency']} slots/threads; PostgreSQL {srv['server_version'].split()[0]} "
        f"fsync={srv['fsync']}; {m['nproc']} CPUs ({m['cpu']}), load average "
        f"{m['loadavg_start'][0]:.1f} → {m['loadavg_end'][0]:.1f}; {report['elapsed_s']:.0f} s\n"
    )
    header = (
        "side",
        "per second, per round",
        "÷ threads",
        "median",
        "CPU µs/job: procs + server",
        "claims of",
        "load",
    )
    print(drain.text_table(header, rows))
    median = statistics.median(by["queue"]["ratios"])
    verdict = "met" if median >= GOAL else "missed"
    print(
        f"\ngoal: queue ≥ {100 * GOAL:.0f} % of the thread pool; "
        f"median {100 * median:.0f} %: {verdict}"
    )


if __name__ == "__main__":
    sys.exit(main())
