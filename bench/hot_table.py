#!/usr/bin/env python
"""Hot table: does the claim path stay small and fast after millions of jobs went through it?

    .venv/bin/python bench/hot_table.py [--n 1000000] [--rate 500] [--retention 3600]
                                        [--batch 500] [--claim 50] [--alter SQL] [--no-write]

One process on a throwaway PostgreSQL 15 (``tests.servers``, fsync on, loopback) drives the
local backend's verbs directly: it keeps ``--batch`` jobs pending (``enqueue_many``), claims
them ``--claim`` at a time (each claim timed), acks each claim in one ``apply_many`` (done), and
every virtual minute runs retention (``prune``, done jobs older than ``--retention`` seconds,
the pruner's own verb and batch). The clock is moved, not waited for: every job advances it
by ``1 / --rate`` seconds, so ``--n`` jobs span ``n / rate`` virtual seconds and retention
keeps about ``retention × rate`` done rows; autovacuum runs as it would (real time).

At every tenth of ``--n`` (and at 1M, 5M, 10M when reached) it reports the claim path's size:
``pg_total_relation_size`` of ``blamequeue_job`` (heap, TOAST and every index) and of the
claim's index alone, live and dead rows. At the end: claim p50/p99 of the first and the last
10 % of the claims, their ratio (goal ≤ 1.5), and retention's largest single DELETE. Writes
``bench/results/hot_table.json`` unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import drain  # noqa: E402
from bench.throughput import machine  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "hot_table.json"
SETTINGS = "bench.settings"
MILESTONES = (1_000_000, 5_000_000, 10_000_000)

log = drain.logger("hot_table")


def sizes() -> dict[str, Any]:
    """The claim path as the server sees it: the job table with its indexes, in MB."""
    ((total, heap, claim_index, live, dead),) = drain.sql(
        "SELECT pg_total_relation_size('blamequeue_job'), pg_relation_size('blamequeue_job'), "
        "pg_relation_size('bq_job_claim'), n_live_tup, n_dead_tup "
        "FROM pg_stat_user_tables WHERE relname = 'blamequeue_job'"
    )
    mb = 1024 * 1024
    return {
        "total_mb": round(total / mb, 1),
        "heap_mb": round(heap / mb, 1),
        "claim_index_mb": round(claim_index / mb, 2),
        "live_rows": live,
        "dead_rows": dead,
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class HotTable:
    def __init__(self, args: argparse.Namespace) -> None:
        from django_blamequeue.backends import get_backend

        self.args = args
        self.engine = get_backend()
        self.now = self.engine.now()
        self.step = timedelta(seconds=1 / args.rate)
        self.claims: list[tuple[int, float]] = []  # (jobs through so far, seconds)
        self.snapshots: list[dict[str, Any]] = []
        self.prunes: list[dict[str, Any]] = []
        self.enqueued = 0
        self.done = 0
        self.next_prune = self.now + timedelta(seconds=60)

    def enqueue(self, count: int) -> None:
        from django_blamequeue.core.ids import new_id
        from django_blamequeue.core.payload import Encoded
        from django_blamequeue.core.records import NewJob

        body = Encoded("application/json", "utf-8", b'{"args": [], "kwargs": {}}')
        jobs = [
            NewJob(job_id=new_id(), queue=drain.QUEUE, name="bench.noop", payload=body)
            for _ in range(count)
        ]
        self.engine.enqueue_many(jobs, now=self.now)
        self.enqueued += count

    def claim_and_ack(self) -> int:
        from django_blamequeue.core import lifecycle
        from django_blamequeue.core.records import Ack

        t0 = time.perf_counter()
        claimed = self.engine.claim([drain.QUEUE], self.args.claim, 60.0, now=self.now)
        self.claims.append((self.done, time.perf_counter() - t0))
        if not claimed:
            return 0
        acks = [
            Ack(
                job_id=c.job_id,
                token=c.token,
                transition=lifecycle.decide(
                    lifecycle.Succeeded(None),
                    attempt=c.attempt,
                    max_attempts=c.max_attempts,
                    policy=lifecycle.Policy(),
                ),
            )
            for c in claimed
        ]
        self.now += self.step * len(claimed)
        results = self.engine.apply_many(acks, now=self.now)
        if not all(r.ok for r in results):
            raise RuntimeError(f"an ack was refused: {[r for r in results if not r.ok]}")
        return len(claimed)

    def prune(self) -> None:
        """The pruner's loop: batches of its size until a batch comes back short."""
        cut = self.now - timedelta(seconds=self.args.retention)
        t0, deleted, batches = time.perf_counter(), 0, 0
        while True:
            report = self.engine.prune(
                done_before=cut, cancelled_before=cut, failed_before=None, limit=5000
            )
            deleted += report.jobs
            batches += 1
            if report.jobs < 5000:
                break
        self.prunes.append(
            {
                "at": self.done,
                "deleted": deleted,
                "batches": batches,
                "seconds": round(time.perf_counter() - t0, 3),
            }
        )

    def snapshot(self, wall0: float) -> None:
        s = {"jobs": self.done, "wall_s": round(time.perf_counter() - wall0, 1), **sizes()}
        recent = [d for n, d in self.claims[-2000:]]
        s["claim_p99_ms_recent"] = round(percentile(recent, 0.99) * 1000, 2)
        self.snapshots.append(s)
        log(
            f"{s['jobs']:>10,} jobs  job table {s['total_mb']:>8.1f} MB (heap {s['heap_mb']} MB, "
            f"claim index {s['claim_index_mb']} MB)  live {s['live_rows']:,} dead "
            f"{s['dead_rows']:,}  claim p99 {s['claim_p99_ms_recent']} ms"
        )

    def run(self) -> None:
        n = self.args.n
        marks = sorted({n * k // 10 for k in range(1, 11)} | {m for m in MILESTONES if m <= n})
        wall0 = time.perf_counter()
        while self.done < n:
            pending = self.enqueued - self.done
            if pending < self.args.batch and self.enqueued < n:
                self.enqueue(min(self.args.batch, n - self.enqueued))
            before = self.done
            self.done += self.claim_and_ack()
            if self.now >= self.next_prune:
                self.prune()
                self.next_prune = self.now + timedelta(seconds=60)
            while marks and self.done >= marks[0] > before:
                marks.pop(0)
                drain.sql("ANALYZE blamequeue_job")  # the statistics autovacuum keeps current
                self.snapshot(wall0)

    def summary(self) -> dict[str, Any]:
        n = self.args.n
        first = [d for at, d in self.claims if at < n // 10]
        last = [d for at, d in self.claims if at >= n - n // 10]

        def ms(values: list[float], q: float) -> float:
            return round(percentile(values, q) * 1000, 3)

        biggest = max(self.prunes, key=lambda p: p["deleted"], default=None)
        return {
            "claims": len(self.claims),
            "first_10pct": {
                "p50_ms": ms(first, 0.5),
                "p99_ms": ms(first, 0.99),
                "mean_ms": round(statistics.fmean(first) * 1000, 3),
            },
            "last_10pct": {
                "p50_ms": ms(last, 0.5),
                "p99_ms": ms(last, 0.99),
                "mean_ms": round(statistics.fmean(last) * 1000, 3),
            },
            "p99_ratio": round(percentile(last, 0.99) / percentile(first, 0.99), 2),
            "virtual_hours": round(n / self.args.rate / 3600, 2),
            "retained_rows_expected": int(self.args.retention * self.args.rate),
            "prune_runs": len(self.prunes),
            "prune_largest": biggest,
            "prune_seconds_total": round(sum(p["seconds"] for p in self.prunes), 1),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="jobs pushed through")
    parser.add_argument("--rate", type=float, default=500.0, help="virtual jobs per second")
    parser.add_argument("--retention", type=float, default=3600.0, help="RETENTION DONE, s")
    parser.add_argument("--batch", type=int, default=500, help="pending jobs kept in the queue")
    parser.add_argument("--claim", type=int, default=50, help="jobs per claim")
    parser.add_argument(
        "--alter",
        action="append",
        default=[],
        metavar="SQL",
        help="a statement run after the migration (a lever tried on the schema)",
    )
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.name}")
    args = parser.parse_args(argv)

    report: dict[str, Any] = {
        "command": "bench/hot_table.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "config": vars(args),
        "machine": machine(),
    }
    (ROOT / ".tmp").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bq-bench-hot-", dir=ROOT / ".tmp") as tmp:
        base = Path(tmp)
        base.chmod(0o755)  # the PostgreSQL user must traverse it when this runs as root
        log("starting a throwaway PostgreSQL (fsync on)")
        with drain.Cluster(base) as pg:
            url = pg.create_database("bench")
            report["server"] = pg.facts()
            drain.setup_django(url, SETTINGS)
            drain.alter(args.alter)
            report["storage"] = drain.sql(
                "SELECT reloptions FROM pg_class WHERE relname = 'blamequeue_job'"
            )[0][0]
            bench = HotTable(args)
            bench.run()
            report["snapshots"] = bench.snapshots
            report["prunes"] = bench.prunes
            report["summary"] = bench.summary()
            counts = dict(drain.sql("SELECT state, count(*) FROM blamequeue_job GROUP BY state"))
            if set(counts) - {"done"}:
                raise RuntimeError(f"jobs left unfinished: {counts}")
    s = report["summary"]
    log(
        f"claim p99 first 10 % {s['first_10pct']['p99_ms']} ms, last 10 % "
        f"{s['last_10pct']['p99_ms']} ms: ×{s['p99_ratio']} (goal ≤ 1.5); largest retention "
        f"run {s['prune_largest']}"
    )
    if not args.no_write:
        RESULTS.write_text(json.dumps(report, indent=2, default=str) + "\n")
        log(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
