#!/usr/bin/env python
"""The memory one ``enqueue_many`` holds, at sizes up to its bound, and the refusal past it.

    .venv/bin/python bench/enqueue_bound.py [--sizes 10000,50000,100000]

Each size runs in a fresh process on a fresh SQLite file (``bench.settings``): migrate, note
the peak RSS, then one ``queue.enqueue_many("bench", [{"i": k} ...])`` of that many small
payloads, and report the time and how far the peak RSS grew. A last process offers
1,000,000 payloads (a generator) and reports the refusal, its time and the peak RSS: the
payloads past ``MAX_ENQUEUE_MANY`` are never read. Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def child(n: int) -> dict[str, Any]:
    import django

    django.setup()
    from django.core.management import call_command

    from django_blamequeue import QueueError, queue

    call_command("migrate", verbosity=0)
    queue.enqueue("bench", {"i": -1})  # warm: connection, imports
    before = peak_mb()
    payloads = ({"i": k} for k in range(n))
    start = time.perf_counter()
    try:
        stored, outcome = len(queue.enqueue_many("bench", payloads)), "stored"
    except QueueError as exc:
        stored, outcome = 0, f"refused ({exc.code.value})"
    took = time.perf_counter() - start
    return {"n": n, "outcome": outcome, "stored": stored, "seconds": took,
            "rss_before_mb": before, "rss_peak_mb": peak_mb()}  # fmt: skip


def run(n: int, base: Path) -> dict[str, Any]:
    db = base / f"b{n}.sqlite3"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "BENCH_DATABASE_URL": f"sqlite:///{db}",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(n)],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True,
    )  # fmt: skip
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    result: dict[str, Any] = json.loads(line[len("RESULT ") :])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="10000,50000,100000")
    args = parser.parse_args()
    if args.child is not None:
        print("RESULT " + json.dumps(child(args.child)), flush=True)
        return
    sizes = [int(s) for s in args.sizes.split(",")] + [1_000_000]
    print(f"{'payloads':>10}  {'outcome':<24} {'seconds':>8}  {'RSS grew (MB)':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            r = run(n, Path(tmp))
            grew = r["rss_peak_mb"] - r["rss_before_mb"]
            print(f"{n:>10,}  {r['outcome']:<24} {r['seconds']:>8.2f}  {grew:>13.0f}")


if __name__ == "__main__":
    main()
