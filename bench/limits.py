#!/usr/bin/env python
"""What limits cost, and whether a per-key limit keeps one tenant from starving another.
PostgreSQL (a throwaway server, fsync on), 2 worker processes (not a test):

    .venv/bin/python bench/limits.py [--n 20000] [--keys 1000] [--big 100000] [--quick]

1. the no-op drain of N jobs by 2 ``runworker --burst --no-sweep --concurrency 64``
   processes, unlimited, and with ``key_concurrency=1`` over ``--keys`` keys (jobs enqueued
   round robin over the keys), alternated ``--rounds`` times; jobs/s from the first claim to
   the last ack as the database recorded them (``bench/throughput.py``'s measure);
2. fairness: a tenant's ``--big`` jobs are queued, 2 workers drain them, and 10 jobs of
   another tenant arrive: how long each waits to start (``started_at - created_at``), with
   ``key_concurrency=32`` (the big tenant may use a quarter of the 128 slots), and without
   any limit for comparison (then the small tenant waits behind the big one's backlog).

It prints a table and writes the generated part of docs/benchmarks.md (between the
``bench:limits:begin``/``end`` markers) and bench/results/limits.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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

from bench.throughput import DOC, Child, log, machine, markdown_table, text_table  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "limits.json"
BEGIN, END = "<!-- bench:limits:begin -->", "<!-- bench:limits:end -->"
TARGET_RATIO = 0.80
TARGET_P99 = 1.0
FAIR_KEY_CONCURRENCY = 32
SMALL = 10


class LimitsChild(Child):
    def reset(self) -> None:
        super().reset()
        self.sql("TRUNCATE blamequeue_queue_control, blamequeue_rate_start, blamequeue_worker")

    def fill(self, n: int, keys: list[str | None]) -> None:
        from bench.jobs import NOOP, QUEUE
        from django_blamequeue import queue

        batch = 5000
        for start in range(0, n, batch):
            size = min(batch, n - start)
            ks = [keys[(start + i) % len(keys)] for i in range(size)]
            queue.enqueue_many(QUEUE, [None] * size, name=NOOP, concurrency_keys=ks)

    def drain(self, n: int, keys: int, tag: str) -> dict[str, Any]:
        from bench.jobs import QUEUE
        from django_blamequeue import queue

        self.reset()
        if keys:
            queue.set_limits(QUEUE, key_concurrency=1)
        self.fill(n, [f"k{i}" for i in range(keys)] if keys else [None])
        return self.measure_drain(2, n, tag)

    def fairness(self, big: int, key_concurrency: int | None, tag: str) -> dict[str, Any]:
        """The small tenant's waits while 2 workers drain the big tenant's backlog."""
        from bench.jobs import NOOP, QUEUE
        from django_blamequeue import queue
        from django_blamequeue.models import Job

        self.reset()
        if key_concurrency:
            queue.set_limits(QUEUE, key_concurrency=key_concurrency)
        self.fill(big, ["big"])
        self.analyze()
        with self.workers(2, burst=False, tag=tag):
            self.wait_for(lambda: self.done_count() >= 2000, 120, "the big tenant under way")
            small = queue.enqueue_many(QUEUE, [None] * SMALL, name=NOOP, concurrency_key="small")
            ids = [e.job_id for e in small]
            self.wait_for(
                lambda: Job.objects.filter(id__in=ids, state="done").count() == SMALL,
                300,
                "the small tenant's jobs",
                every=0.05,
            )
            big_done = self.done_count() - SMALL
        rows = Job.objects.filter(id__in=ids).values_list("created_at", "started_at")
        waits = sorted((s - c).total_seconds() for c, s in rows)
        p99 = waits[min(len(waits) - 1, round(0.99 * (len(waits) - 1)))]
        log(
            f"fairness {tag}: small tenant waits p50 {statistics.median(waits):.3f} s, "
            f"p99 {p99:.3f} s ({big_done:,} of the big tenant's jobs done by then)"
        )
        return {"waits": waits, "p50": statistics.median(waits), "p99": p99, "big_done": big_done}

    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        self.startup_cpu()
        unlimited, keyed = [], []
        for r in range(cfg["rounds"]):
            unlimited.append(self.drain(cfg["n"], 0, f"unlimited-{r}"))
            keyed.append(self.drain(cfg["n"], cfg["keys"], f"keyed-{r}"))
        self.result["unlimited"] = unlimited
        self.result["keyed"] = keyed
        self.result["fair"] = self.fairness(cfg["big"], FAIR_KEY_CONCURRENCY, "fair")
        self.result["fifo"] = self.fairness(cfg["big"], None, "fifo")
        return self.result


def child_main(cfg: dict[str, Any]) -> int:
    result = LimitsChild(cfg).run()
    print("RESULT " + json.dumps(result, default=str))
    return 0


def best(runs: list[dict[str, Any]]) -> float:
    return max(r["rate"] for r in runs)


def section(report: dict[str, Any]) -> str:
    res, cfg, m = report["result"], report["config"], report["machine"]
    u, k = best(res["unlimited"]), best(res["keyed"])
    ratio = k / u
    fair, fifo = res["fair"], res["fifo"]
    rows = [
        ("no-op drain, 2 workers, unlimited (jobs/s)", f"{u:,.0f}", ""),
        (
            f"no-op drain, 2 workers, key_concurrency=1 over {cfg['keys']:,} keys (jobs/s)",
            f"{k:,.0f}",
            "",
        ),
        (
            "  ratio keyed / unlimited",
            f"{ratio:.2f}",
            f"≥ {TARGET_RATIO:.2f}: " + ("met" if ratio >= TARGET_RATIO else "missed"),
        ),
        (
            f"{SMALL} jobs of a small tenant behind {cfg['big']:,} of a big one, "
            f"key_concurrency={FAIR_KEY_CONCURRENCY}: wait p50 / p99 (s)",
            f"{fair['p50']:.3f} / {fair['p99']:.3f}",
            f"p99 < {TARGET_P99:g} s: " + ("met" if fair["p99"] < TARGET_P99 else "missed"),
        ),
        (
            "  the same without a per-key limit (FIFO): wait p50 / p99 (s)",
            f"{fifo['p50']:.3f} / {fifo['p99']:.3f}",
            "",
        ),
    ]
    each = ", ".join(
        f"{a['rate']:,.0f} / {b['rate']:,.0f}"
        for a, b in zip(res["unlimited"], res["keyed"], strict=True)
    )
    return "\n".join(
        [
            BEGIN,
            f"<!-- written by bench/limits.py on {report['finished']}; "
            "edit outside the markers -->",
            "",
            f"Run of {report['finished']} (`{report['command']}`, {report['elapsed_s']:.0f} s).",
            "",
            f"- Machine: {m['nproc']} CPUs, load average {m['loadavg_start'][0]:.1f} at the "
            f"start and {report['loadavg_end'][0]:.1f} at the end (other processes share this "
            "machine).",
            f"- PostgreSQL started by `tests.servers` (fsync on); N = {cfg['n']:,} no-op jobs per "
            "drain; workers `manage.py runworker bench --no-sweep --concurrency 64 --burst` × 2.",
            f"- Drains alternate unlimited / keyed, {cfg['rounds']} rounds; the best of each is "
            f"compared (each round, unlimited / keyed: {each} jobs/s).",
            "",
            markdown_table(("measurement", "PostgreSQL", "target"), rows),
            "",
            END,
        ]
    )


def write_doc(report: dict[str, Any]) -> None:
    text = DOC.read_text()
    generated = section(report)
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        text = head + generated + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## Limits\n\n" + generated + "\n"
    DOC.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--n", type=int, default=None, help="jobs per drain (default 20000)")
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--big", type=int, default=None, help="the big tenant (default 100000)")
    parser.add_argument("--rounds", type=int, default=None, help="drain pairs (default 3)")
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument("--child", metavar="CONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(json.loads(args.child))
    cfg: dict[str, Any] = {
        "n": args.n or (4000 if args.quick else 20000),
        "keys": args.keys,
        "big": args.big or (10_000 if args.quick else 100_000),
        "rounds": args.rounds or (1 if args.quick else 3),
        "concurrency": 64,
        "drain_timeout": 600,
    }
    report: dict[str, Any] = {
        "command": "bench/limits.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "config": cfg,
        "machine": machine(),
    }
    report["command"] = report["command"].strip()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bq-limits-") as tmp:
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
    res = report["result"]
    u, k = best(res["unlimited"]), best(res["keyed"])
    print()
    print(
        text_table(
            ("measurement", "value"),
            [
                ("unlimited drain (jobs/s)", f"{u:,.0f}"),
                (f"key_concurrency=1 over {cfg['keys']} keys (jobs/s)", f"{k:,.0f}"),
                ("ratio", f"{k / u:.2f} (target ≥ {TARGET_RATIO})"),
                ("fair: small tenant wait p99 (s)", f"{res['fair']['p99']:.3f} (target < 1)"),
                ("FIFO: small tenant wait p99 (s)", f"{res['fifo']['p99']:.3f}"),
            ],
        )
    )
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(report, indent=1, default=str) + "\n")
        write_doc(report)
        print(f"\nwrote {DOC.relative_to(ROOT)}, {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
