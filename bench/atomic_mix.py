#!/usr/bin/env python
"""Atomic jobs on SQLite beside plain ones, drained by ONE worker process (not a test).

    .venv/bin/python bench/atomic_mix.py [--plain 400] [--atomic 40] [--seconds 0.05]

It makes a fresh SQLite database, migrates, and runs ``manage.py runworker mixplain mixledger
--burst --no-sweep`` (default concurrency) three times on it:

- **plain only**: ``--plain`` jobs that each sleep ``--seconds`` (an HTTP call, say);
- **mixed**: the same plain jobs and ``--atomic`` ``@job(atomic=True)`` jobs that write a row
  and sleep as long inside their transaction, on a queue of their own;
- **one slot**: the mixed set with ``--concurrency 1``, what a worker serving atomic jobs on
  SQLite defaulted to before atomic runs took turns.

It reports each run's plain jobs per second (first claim to the last plain ack, the
database's own timestamps) and the whole drain. The atomic runs take turns, one at a time, so
the mixed set's plain rate should stay near the plain-only rate. It writes
``bench/results/atomic-mix-latest.json``; docs/benchmarks.md quotes a run.
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
RESULTS = ROOT / "bench" / "results" / "atomic-mix-latest.json"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def drain(args: argparse.Namespace, label: str, atomic: int, extra: list[str]) -> dict[str, Any]:
    """Enqueue the set, run one burst worker over it, read the timestamps back."""
    from django.db import connection

    from bench.atomicapp.jobs import ATOMIC, PLAIN, ledger, notify
    from django_blamequeue.models import Job

    Job.objects.all().delete()
    notify.enqueue_many([{"seconds": args.seconds}] * args.plain)  # type: ignore[attr-defined]
    if atomic:
        ledger.enqueue_many([{"seconds": args.seconds}] * atomic)  # type: ignore[attr-defined]
    connection.close()
    command = [sys.executable, str(MANAGE), "runworker", PLAIN, ATOMIC, "--burst", "--no-sweep"]
    command += [*extra, "--progress-interval", "3600"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log(f"{label}: {args.plain} plain + {atomic} atomic jobs; {' '.join(command[2:])}")
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"the worker exited with {done.returncode}:\n{done.stdout}{done.stderr}")
    jobs = Job.objects.all()
    not_done = jobs.exclude(state="done").count()
    first = min(jobs.values_list("started_at", flat=True))
    plain_last = max(jobs.filter(queue=PLAIN).values_list("finished_at", flat=True))
    last = max(jobs.values_list("finished_at", flat=True))
    plain_s = (plain_last - first).total_seconds()
    banner = [line.strip() for line in done.stdout.splitlines() if "concurrency" in line]
    return {
        "label": label,
        "plain": args.plain,
        "atomic": atomic,
        "not_done": not_done,
        "plain_drain_s": plain_s,
        "plain_per_s": args.plain / plain_s,
        "all_drain_s": (last - first).total_seconds(),
        "banner": banner[:1],
        "worker_command": "manage.py " + " ".join(command[2:]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plain", type=int, default=400)
    parser.add_argument("--atomic", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=0.05)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {
        "command": "bench/atomic_mix.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_start": os.getloadavg(),
        },
    }
    with tempfile.TemporaryDirectory(prefix="bq-bench-atomic-") as tmp:
        os.environ["BENCH_DATABASE_URL"] = f"sqlite:///{Path(tmp) / 'bench.sqlite3'}"
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.atomic_settings"
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
        report["runs"] = [
            drain(args, "plain only", 0, []),
            drain(args, "mixed", args.atomic, []),
            drain(args, "one slot", args.atomic, ["--concurrency", "1"]),
        ]
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["finished"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    base = report["runs"][0]["plain_per_s"]
    for r in report["runs"]:
        print(
            f"{r['label']:<11} {r['plain']} plain + {r['atomic']} atomic of {args.seconds:g} s: "
            f"plain {r['plain_per_s']:,.0f}/s ({r['plain_per_s'] / base:.2f}x plain only), "
            f"all drained in {r['all_drain_s']:.2f} s, {r['not_done']} not done"
        )
    RESULTS.write_text(json.dumps(report, indent=2, default=str) + "\n")
    log(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
