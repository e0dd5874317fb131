#!/usr/bin/env python
"""``async def`` jobs that wait on I/O, drained by ONE worker process (not a test).

    .venv/bin/python bench/async_jobs.py [--n 1000] [--seconds 1] [--concurrency 1000]
                                         [--db sqlite|postgres]

It makes a fresh database (an SQLite file; or, with ``--db postgres``, a throwaway PostgreSQL
from ``tests.servers``, fsync on), migrates, enqueues N jobs that each ``await
asyncio.sleep(seconds)`` (``bench/asyncapp/jobs.py``) and runs one ``manage.py runworker
asyncbench --burst --no-sweep --concurrency C`` process until they are all done. It reports the
drain time from the database's own timestamps (first claim to last ack), the process's wall
time (start-up included) and its CPU, and the most jobs in flight at once (the most that
started within one job's sleep of each other). N jobs run one at a time would take
N x seconds. It writes ``bench/results/async-latest.json``; the figure in
docs/benchmarks.md quotes a run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MANAGE = ROOT / "testproject" / "manage.py"
RESULTS = ROOT / "bench" / "results" / "async-latest.json"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(args: argparse.Namespace, url: str, logdir: Path) -> dict[str, Any]:
    os.environ["BENCH_DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.async_settings"
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from bench.asyncapp.jobs import QUEUE, nap
    from django_blamequeue.models import Job

    call_command("migrate", verbosity=0, interactive=False)
    nap.enqueue_many([{"seconds": args.seconds}] * args.n)  # type: ignore[attr-defined]
    connection.close()
    command = [
        sys.executable,
        str(MANAGE),
        "runworker",
        QUEUE,
        "--burst",
        "--no-sweep",
        "--concurrency",
        str(args.concurrency),
        "--progress-interval",
        "3600",
    ]
    out = (logdir / "worker.log").open("wb")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log(f"{args.n:,} jobs of await asyncio.sleep({args.seconds:g}); one worker: {command[2:]}")
    t0 = time.perf_counter()
    worker = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    cpu = 0.0
    while worker.poll() is None:
        cpu = cpu_of(worker.pid)  # the last reading before it exits
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    if worker.returncode != 0:
        raise RuntimeError(f"the worker exited with {worker.returncode}; see {logdir}")
    jobs = Job.objects.filter(queue=QUEUE)
    done = jobs.filter(state="done").count()
    starts = sorted(jobs.values_list("started_at", flat=True))
    first = min(starts)
    last = max(jobs.values_list("finished_at", flat=True))
    window = args.seconds
    most, j = 0, 0
    for i, t in enumerate(starts):  # jobs started within one sleep of each other: at once
        while (t - starts[j]).total_seconds() >= window:
            j += 1
        most = max(most, i - j + 1)
    drain = (last - first).total_seconds()
    return {
        "n": args.n,
        "seconds": args.seconds,
        "concurrency": args.concurrency,
        "done": done,
        "drain_s": drain,
        "wall_s": wall,
        "worker_cpu_s": cpu,
        "most_at_once": most,
        "serial_s": args.n * args.seconds,
        "speedup": args.n * args.seconds / drain,
        "worker_command": "manage.py " + " ".join(command[2:]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=1000)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {
        "command": "bench/async_jobs.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_start": os.getloadavg(),
        },
        "db": args.db,
    }
    with tempfile.TemporaryDirectory(prefix="bq-bench-async-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)  # the PostgreSQL user must traverse it when running as root
        if args.db == "sqlite":
            report["result"] = run(args, f"sqlite:///{base / 'bench.sqlite3'}", base)
        else:
            from tests.servers import PostgresServer

            server = PostgresServer(base / "pg")
            server.start()
            try:
                import psycopg

                with psycopg.connect(server.url, autocommit=True) as conn:
                    conn.execute("CREATE DATABASE bench_async")
                report["result"] = run(args, server.url.rsplit("/", 1)[0] + "/bench_async", base)
            finally:
                server.stop()
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["finished"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    r = report["result"]
    print(
        f"{r['done']:,}/{r['n']:,} jobs of await asyncio.sleep({r['seconds']:g}) drained by one "
        f"worker (--concurrency {r['concurrency']}, {args.db}) in {r['drain_s']:.2f} s "
        f"(first claim to last ack; {r['wall_s']:.2f} s with start-up), {r['speedup']:,.0f}x "
        f"faster than one at a time ({r['serial_s']:,.0f} s); at most {r['most_at_once']:,} "
        f"at once; worker CPU {r['worker_cpu_s']:.2f} s"
    )
    RESULTS.write_text(json.dumps(report, indent=2, default=str) + "\n")
    log(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
