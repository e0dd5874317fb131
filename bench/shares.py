#!/usr/bin/env python
"""Weighted shares between concurrency keys: two tenants of weights 5 and 1 with equal
backlogs, and a lone tenant. PostgreSQL (a throwaway server, fsync on), 2 worker processes
(not a test; docs/weighted-shares.md):

    .venv/bin/python bench/shares.py [--n 3000] [--slots 24] [--job-ms 20] [--no-write]

1. both tenants: ``--n`` jobs each of ``enterprise:acme`` and ``free:bob`` (enqueued
   alternately, each job sleeping ``--job-ms``), the queue limited to ``--slots`` jobs in
   flight with ``key_weights={"enterprise:*": 5}``; 2 ``runworker --concurrency 32`` drain
   them. The ratio is of the jobs each tenant started while both had work (up to the last
   start of the tenant whose backlog ran out first); target 5 ± 15 %;
2. a lone tenant: ``--n`` jobs of ``free:bob`` alone under the same limits; the jobs in
   flight, sampled every 20 ms while its backlog lasts, against the ``--slots``.

It prints a table and writes the generated part of docs/weighted-shares.md (between the
``bench:shares:begin``/``end`` markers) and bench/results/shares.json.
"""

from __future__ import annotations

import argparse
import json
import os
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

from bench.throughput import Child, log, machine, markdown_table, text_table  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "shares.json"
DOC = ROOT / "docs" / "weighted-shares.md"
BEGIN, END = "<!-- bench:shares:begin -->", "<!-- bench:shares:end -->"
WEIGHTS = {"enterprise:*": 5}
BIG, SMALL = "enterprise:acme", "free:bob"
TARGET, TOLERANCE = 5.0, 0.15


class SharesChild(Child):
    def reset(self) -> None:
        super().reset()
        self.sql("TRUNCATE blamequeue_queue_control, blamequeue_rate_start, blamequeue_worker")

    def fill(self, keys: list[str]) -> None:
        from bench.jobs import QUEUE, SLEEP
        from django_blamequeue import queue

        n, seconds = self.cfg["n"], self.cfg["job_ms"] / 1000
        for start in range(0, n, 1000):
            size = min(1000, n - start)
            for key in keys:
                queue.enqueue_many(QUEUE, [seconds] * size, name=SLEEP, concurrency_key=key)

    def limited(self) -> None:
        from bench.jobs import QUEUE
        from django_blamequeue import queue

        queue.set_limits(QUEUE, concurrency=self.cfg["slots"], key_weights=WEIGHTS)

    def sampled(self, tag: str) -> tuple[list[int], float]:
        """Drain with 2 workers, sampling the jobs in flight every 20 ms; the drain's time."""
        samples: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            from django.db import connection

            try:
                while not stop.is_set():
                    with connection.cursor() as cur:
                        cur.execute("SELECT count(*) FROM blamequeue_job WHERE state = 'inflight'")
                        samples.append(int(cur.fetchone()[0]))
                    stop.wait(0.02)
            finally:
                connection.close()

        started = time.perf_counter()
        watcher = threading.Thread(target=sample)
        watcher.start()
        try:
            with self.workers(2, burst=True, tag=tag):
                pass
        finally:
            stop.set()
            watcher.join()
        return samples, time.perf_counter() - started

    def both(self) -> dict[str, Any]:
        from django.db.models import Max

        from django_blamequeue.models import Job

        self.reset()
        self.limited()
        self.fill([BIG, SMALL])
        self.analyze()
        samples, seconds = self.sampled("both")
        last = {
            key: Job.objects.filter(concurrency_key=key).aggregate(t=Max("started_at"))["t"]
            for key in (BIG, SMALL)
        }
        until = min(last.values())
        started = {
            key: Job.objects.filter(concurrency_key=key, started_at__lte=until).count()
            for key in (BIG, SMALL)
        }
        ratio = started[BIG] / max(started[SMALL], 1)
        log(f"both tenants: started while both had work {started}, ratio {ratio:.2f}")
        return {"started": started, "ratio": ratio, "seconds": seconds, "inflight": samples}

    def lone(self) -> dict[str, Any]:
        self.reset()
        self.limited()
        self.fill([SMALL])
        self.analyze()
        samples, seconds = self.sampled("lone")
        busy = [s for s in samples if s > 0]
        mean = statistics.mean(busy) if busy else 0.0
        log(f"lone tenant: in flight mean {mean:.1f}, max {max(samples, default=0)}")
        return {"mean": mean, "max": max(samples, default=0), "seconds": seconds}

    def run(self) -> dict[str, Any]:
        self.result["both"] = self.both()
        self.result["lone"] = self.lone()
        return self.result


def child_main(cfg: dict[str, Any]) -> int:
    result = SharesChild(cfg).run()
    print("RESULT " + json.dumps(result, default=str))
    return 0


def verdict(ratio: float) -> str:
    low, high = TARGET * (1 - TOLERANCE), TARGET * (1 + TOLERANCE)
    return f"{low:.2f}–{high:.2f}: " + ("met" if low <= ratio <= high else "missed")


def rows(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    res, cfg = report["result"], report["config"]
    both, lone = res["both"], res["lone"]
    n, slots = cfg["n"], cfg["slots"]
    return [
        (
            f"jobs started while both had work, {BIG} (weight 5) / {SMALL} (weight 1)",
            f"{both['started'][BIG]:,} / {both['started'][SMALL]:,}",
            "",
        ),
        ("  ratio", f"{both['ratio']:.2f}", verdict(both["ratio"])),
        (f"both tenants: {2 * n:,} jobs drained in (s)", f"{both['seconds']:.1f}", ""),
        (
            f"lone tenant: jobs in flight while it had work, mean / max (of {slots} slots)",
            f"{lone['mean']:.1f} / {lone['max']}",
            "uses the whole queue: " + ("yes" if lone["max"] >= slots else "no"),
        ),
        (f"lone tenant: {n:,} jobs drained in (s)", f"{lone['seconds']:.1f}", ""),
    ]


def section(report: dict[str, Any]) -> str:
    cfg, m = report["config"], report["machine"]
    return "\n".join(
        [
            BEGIN,
            f"<!-- written by bench/shares.py on {report['finished']}; "
            "edit outside the markers -->",
            "",
            f"Run of {report['finished']} (`{report['command']}`, {report['elapsed_s']:.0f} s).",
            "",
            f"- Machine: {m['nproc']} CPUs, load average {m['loadavg_start'][0]:.1f} at the "
            f"start and {report['loadavg_end'][0]:.1f} at the end (other processes share this "
            "machine).",
            f"- PostgreSQL started by `tests.servers` (fsync on); {cfg['n']:,} jobs per tenant, "
            f"each sleeping {cfg['job_ms']} ms; the queue limited to {cfg['slots']} jobs in "
            f'flight with `key_weights={{"enterprise:*": 5}}`; workers `manage.py runworker '
            "bench --no-sweep --concurrency 32 --burst` × 2.",
            "",
            markdown_table(("measurement", "PostgreSQL", "target"), rows(report)),
            "",
            END,
        ]
    )


def write_doc(report: dict[str, Any]) -> None:
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    DOC.write_text(head + section(report) + rest.split(END, 1)[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--n", type=int, default=3000, help="jobs per tenant")
    parser.add_argument("--slots", type=int, default=24, help="the queue's concurrency")
    parser.add_argument("--job-ms", type=int, default=20, help="how long each job sleeps")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument("--child", metavar="CONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(json.loads(args.child))
    cfg: dict[str, Any] = {
        "n": args.n,
        "slots": args.slots,
        "job_ms": args.job_ms,
        "concurrency": 32,
        "drain_timeout": 600,
    }
    command = "bench/shares.py " + " ".join(argv if argv is not None else sys.argv[1:])
    report: dict[str, Any] = {"command": command.strip(), "config": cfg, "machine": machine()}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bq-shares-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)
        cfg["logdir"] = str(base / "logs")
        Path(cfg["logdir"]).mkdir()
        from tests.servers import PostgresServer

        server = PostgresServer(base / "pg")
        log("PostgreSQL: starting a throwaway server (fsync on)")
        server.start()
        try:
            import psycopg

            with psycopg.connect(server.url, autocommit=True) as conn:
                conn.execute("CREATE DATABASE bench")
            url = server.url.rsplit("/", 1)[0] + "/bench"
            env = {
                **os.environ,
                "BENCH_DATABASE_URL": url,
                "BENCH_PG_PID": str(server.pid),
                "DJANGO_SETTINGS_MODULE": "bench.settings",
                "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            }
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
                    f"the run failed (exit {proc.returncode}); logs in {cfg['logdir']}"
                )
            report["result"] = json.loads(lines[-1][len("RESULT ") :])
        finally:
            server.stop()
    report["elapsed_s"] = time.perf_counter() - started
    report["loadavg_end"] = os.getloadavg()
    report["finished"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print()
    print(text_table(("measurement", "value", "target"), rows(report)))
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        slim = {**report, "result": {**report["result"]}}
        slim["result"]["both"] = {
            k: v for k, v in slim["result"]["both"].items() if k != "inflight"
        }
        RESULTS.write_text(json.dumps(slim, indent=1, default=str) + "\n")
        write_doc(report)
        print(f"\nwrote {DOC.relative_to(ROOT)}, {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
