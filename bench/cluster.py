"""Drain throughput on a Redis Cluster with the queue's jobs on 1 shard, then on 3 (one run).

A throwaway cluster (``tests.servers.RedisClusterServer``: 3 primaries + 3 replicas, AOF
``everysec``) on 127.0.0.1. One redis backend keeps all its keys in one hash slot, so one
backend is one shard; the 3-shard round configures three backends whose key prefixes hash to
slots on three different primaries (docs/backends/redis.md, "Redis Cluster") and splits the
jobs and the workers over them. Both rounds drain the same number of no-op jobs with the same
worker processes (``runworker bench --backend shardI --burst``); the figure is jobs/s from the
first job done to the last (polled every 0.1 s), and the CPU seconds each primary spent.

    python bench/cluster.py [--jobs 30000] [--workers 3] [--concurrency 64]

Prints a table and writes ``bench/results/cluster.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.throughput import MANAGE, _proc_cpu, machine  # noqa: E402
from tests.servers import RedisClusterServer  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "cluster.json"


def spread_prefixes(cluster: RedisClusterServer, count: int) -> list[str]:
    """Key prefixes whose hash tags land on ``count`` different primaries."""
    from redis.crc import key_slot

    owners = []
    for node in cluster.primaries():
        ranges = [tuple(int(x) for x in r.split("-")) for r in node["slots"] if "-" in r]
        owners.append((node["port"], ranges))
    chosen: dict[int, str] = {}
    for i in range(10_000):
        prefix = f"bench-{i}"
        slot = key_slot(("{" + prefix + "}").encode())
        port = next(p for p, ranges in owners if any(lo <= slot <= hi for lo, hi in ranges))
        chosen.setdefault(port, prefix)
        if len(chosen) == count:
            return list(chosen.values())
    raise RuntimeError("no prefixes spread over the primaries")


def primary_pids(cluster: RedisClusterServer) -> dict[int, int]:
    ports = {n["port"] for n in cluster.primaries()}
    return {n.port: n.pid for n in cluster.nodes if n.port in ports and n.pid is not None}


def drain(
    prefixes: list[str], shards: int, args: argparse.Namespace, env: dict[str, str], log: Path
) -> dict[str, Any]:
    """Enqueue ``args.jobs`` no-op jobs over the first ``shards`` backends, drain them with
    ``args.workers`` processes, answer the figures."""
    from django_blamequeue import queue
    from django_blamequeue.backends import get_backend

    per = args.jobs // shards
    for s in range(shards):
        for start in range(0, per, 1000):
            queue.enqueue_many(
                "bench", [None] * min(1000, per - start), name="bench.noop", backend=f"shard{s}"
            )
    total = per * shards
    backends = [get_backend(f"shard{s}") for s in range(shards)]

    def done() -> int:
        n = 0
        for b in backends:
            for stat in b.stats():
                if stat.queue == "bench":
                    n += int(stat.counts.get("done", 0))
        return n

    base = done()
    command = [
        sys.executable,
        str(MANAGE),
        "runworker",
        "bench",
        "--no-sweep",
        "--burst",
        "--concurrency",
        str(args.concurrency),
        "--progress-interval",
        "3600",
    ]
    cpu_before = {port: _proc_cpu(pid, False) for port, pid in env_pids(env).items()}
    procs = []
    for w in range(args.workers):
        out = (log / f"shards{shards}-worker{w}.log").open("wb")
        procs.append(
            subprocess.Popen(
                [*command, "--backend", f"shard{w % shards}"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=ROOT,
            )
        )
    first = last = None
    shown = 0.0
    deadline = time.monotonic() + 600
    while True:
        n = done() - base
        now = time.monotonic()
        if n > 0 and first is None:
            first = now
        if n >= total:
            last = now
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{total - n} jobs not drained; see {log}")
        if now >= shown + 1.0:
            shown = now
            print(f"  {shards} shard(s): {n:,}/{total:,} done", file=sys.stderr, flush=True)
        time.sleep(0.1)
    for p in procs:
        p.wait(timeout=120)
    cpu = {
        port: round(_proc_cpu(pid, False) - cpu_before[port], 2)
        for port, pid in env_pids(env).items()
    }
    assert first is not None and last is not None
    return {
        "shards": shards,
        "jobs": total,
        "seconds": round(last - first, 2),
        "jobs_per_s": round(total / (last - first)),
        "primary_cpu_s": cpu,
    }


def env_pids(env: dict[str, str]) -> dict[int, int]:
    return {int(k): int(v) for k, v in json.loads(env["BENCH_PRIMARY_PIDS"]).items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bq-cluster-bench-"))
    cluster = RedisClusterServer(base / "cluster", appendonly="everysec")
    cluster.start()
    try:
        prefixes = spread_prefixes(cluster, 3)
        sqlite = base / "bench.sqlite3"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "bench.cluster_settings",
            "BENCH_DATABASE_URL": f"sqlite:///{sqlite}",
            "BENCH_CLUSTER_URL": cluster.url,
            "BENCH_CLUSTER_PREFIXES": ",".join(prefixes),
            "BENCH_PRIMARY_PIDS": json.dumps(primary_pids(cluster)),
        }
        os.environ.update(env)
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        rounds = [drain(prefixes, shards, args, env, base) for shards in (1, 3)]
    finally:
        cluster.stop()
    result = {
        "command": "bench/cluster.py " + " ".join(sys.argv[1:]),
        "config": vars(args),
        "machine": machine(),
        "load_average": os.getloadavg(),
        "prefixes": prefixes,
        "rounds": rounds,
    }
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print("| shards | jobs | drain | jobs/s | CPU s per primary |")
    print("| --- | --- | --- | --- | --- |")
    for r in rounds:
        cpu = ", ".join(f"{v:.1f}" for v in r["primary_cpu_s"].values())
        print(f"| {r['shards']} | {r['jobs']:,} | {r['seconds']} s | {r['jobs_per_s']:,} | {cpu} |")
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
