#!/usr/bin/env python
"""What the console's charts cost (docs/admin.md#charts), on local SQLite, local PostgreSQL
and Redis (throwaway servers; not a test)::

    .venv/bin/python bench/charts.py [--pairs 10] [--runs 200]

1. per job: ``Tally.add``, the worker's in-memory count of one acked attempt (µs);
2. per flush: ``record_samples`` of ``--pairs`` (queue, job name) pairs — one round trip a
   worker makes every 10 s and the sweeper's depth write once a minute (median ms);
3. space: a week of flushes for ``--pairs`` pairs (every minute for the last two hours,
   every 10 minutes for two days, every hour for eight days, then ``prune_buckets``): the
   buckets kept per pair (at most 120 + 288 + 192) and, on PostgreSQL, the table's bytes.

Each engine runs in a child process with ``bench/settings.py`` (``BENCH_DATABASE_URL``,
``BENCH_REDIS_URL``). Prints a table; pasted by hand into docs/admin.md#charts.
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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def child(pairs: int, runs: int) -> dict[str, Any]:
    """Runs inside the engine's process: Django set up from bench/settings.py."""
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django_blamequeue.backends import get_backend
    from django_blamequeue.core.states import State
    from django_blamequeue.core.timeseries import SLOTS, Sample
    from django_blamequeue.worker.tally import Tally

    backend = get_backend("default")
    # 1. per job: the tally's count of one ack (duck-typed run, transition and result).
    tally = Tally(backend, lease=30.0)
    now = datetime.now(UTC)
    runs_ = [
        SimpleNamespace(
            claimed=SimpleNamespace(
                queue=f"q{i % 8}",
                name=f"task{i % 40}",
                available_at=now,
                lease_expires_at=now + timedelta(seconds=31),
            ),
            started=time.monotonic(),
        )
        for i in range(1000)
    ]
    transition = SimpleNamespace(give_back_attempt=False)
    result = SimpleNamespace(ok=True, state=State.DONE)
    n = 200_000
    started = time.perf_counter()
    for i in range(n):
        tally.add(runs_[i % 1000], transition, result)  # type: ignore[arg-type]
    per_job_us = (time.perf_counter() - started) / n * 1e6

    # 2. per flush: one record_samples of `pairs` pairs.
    def samples(depth: bool = False) -> list[Sample]:
        return [
            Sample(
                queue=f"q{i % 8}",
                name=f"task{i}",
                done=50,
                failed=1,
                retried=2,
                wait=tuple([5] * SLOTS),
                run=tuple([5] * SLOTS),
            )
            for i in range(pairs)
        ] + ([Sample(queue=f"q{i}", depth=1000) for i in range(8)] if depth else [])

    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        backend.record_samples(samples())
        times.append(time.perf_counter() - t0)
    flush_ms = statistics.median(times) * 1000

    # 3. space: a week of flushes at the resolutions' steps, then prune.
    end = datetime.now(UTC)
    moments = (
        [end - timedelta(minutes=m) for m in range(120)]
        + [end - timedelta(minutes=10 * m) for m in range(12, 288)]
        + [end - timedelta(hours=h) for h in range(48, 192)]
    )
    t0 = time.perf_counter()
    for moment in sorted(moments):
        backend.record_samples(samples(depth=True), moment)
    fill_s = time.perf_counter() - t0
    pruned = backend.prune_buckets(end)
    kept = 0
    for step, since in (
        (60, timedelta(hours=2)),
        (600, timedelta(days=2)),
        (3600, timedelta(days=8)),
    ):
        kept += len(backend.buckets(step, end - since, end + timedelta(hours=1)))
    size = None
    from django.db import connection

    if backend.protocol == "local" and connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_total_relation_size('blamequeue_time_bucket')")
            size = int(cur.fetchone()[0])
    return {
        "engine": f"{backend.protocol} ({connection.vendor})"
        if backend.protocol == "local"
        else backend.protocol,
        "per_job_us": per_job_us,
        "flush_ms": flush_ms,
        "fill_s": fill_s,
        "flushes": len(moments),
        "pruned": pruned,
        "kept_per_pair": kept / (pairs + 8),
        "bytes": size,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.pairs, args.runs)))
        return 0
    from tests.servers import PostgresServer, RedisServer

    (ROOT / ".tmp").mkdir(exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="bq-charts-", dir=ROOT / ".tmp") as tmp:
        pg, redis = PostgresServer(Path(tmp) / "pg"), RedisServer(Path(tmp) / "redis")
        pg.start()
        redis.start()
        try:
            for env in (
                {"BENCH_DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3"},
                {"BENCH_DATABASE_URL": pg.url},
                {
                    "BENCH_DATABASE_URL": f"sqlite:///{tmp}/redis.sqlite3",
                    "BENCH_REDIS_URL": redis.url,
                },
            ):
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        f"--pairs={args.pairs}",
                        f"--runs={args.runs}",
                    ],
                    env={**os.environ, **env, "DJANGO_SETTINGS_MODULE": "bench.settings"},
                    check=True,
                    capture_output=True,
                    text=True,
                    cwd=ROOT,
                )
                results.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(results[-1], file=sys.stderr)
        finally:
            redis.stop()
            pg.stop()
    print(f"{args.pairs} (queue, name) pairs + 8 queue depths; median of {args.runs} flushes")
    print("| engine | per job (tally) | per flush | a week of buckets kept per pair | table size |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for r in results:
        size = f"{r['bytes'] / 1024:,.0f} KiB" if r["bytes"] else "–"
        print(
            f"| {r['engine']} | {r['per_job_us']:.2f} µs | {r['flush_ms']:.2f} ms | "
            f"{r['kept_per_pair']:.0f} | {size} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
