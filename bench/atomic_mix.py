#!/usr/bin/env python
"""Atomic jobs on SQLite beside plain ones, drained by ONE worker process (not a test).

    .venv/bin/python bench/atomic_mix.py [--plain 400] [--atomic 40] [--seconds 0.05]
                                         [--atomic-seconds 0.005]

It makes a fresh SQLite database, migrates, and drains one set of jobs after another with
``manage.py runworker mixplain mixledger --burst --no-sweep`` (ten slots, the default):

- **plain only**: ``--plain`` jobs that each sleep ``--seconds`` (an HTTP call, say);
- **own queue**: the same plain jobs and ``--atomic`` ``@job(atomic=True)`` jobs that write a
  row and sleep ``--atomic-seconds`` inside their transaction (a ledger entry), on a queue of
  their own, one enqueued after every tenth plain one so that they meet in the claims;
- **one queue**: the same, the atomic jobs on the plain jobs' queue (``@job``'s default
  queue is shared);
- **one slot**: the own-queue set with ``--concurrency 1``, what a worker serving atomic jobs
  on SQLite defaulted to before atomic runs took turns;
- **own queue, long atomic**: atomic jobs as long as the plain ones, the write lock held for
  that long each time.

It reports each run's plain jobs per second (first claim to the last plain ack, the
database's own timestamps) and the whole drain. Atomic runs take turns and the other jobs keep
their slots; what the plain jobs still lose is the time an atomic run holds SQLite's one write
lock, when their claims and acks wait. It writes ``bench/results/atomic-mix-latest.json``;
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
RESULTS = ROOT / "bench" / "results" / "atomic-mix-latest.json"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def drain(
    args: argparse.Namespace,
    label: str,
    atomic: int,
    extra: list[str],
    *,
    beside: bool = False,
    long: bool = False,
) -> dict[str, Any]:
    """Enqueue the set, one atomic job after every ``plain // atomic`` plain ones (so that
    they meet in the claims), run one burst worker over it, read the timestamps back.
    ``beside``: the atomic jobs on the plain jobs' queue; ``long``: as long as a plain one."""
    atomic_seconds = args.seconds if long else args.atomic_seconds
    from django.db import connection

    from bench.atomicapp.jobs import ATOMIC, PLAIN, ledger, ledger_beside, notify
    from django_blamequeue.models import Job

    Job.objects.all().delete()
    step = max(1, args.plain // max(1, atomic))
    atomic_job = ledger_beside if beside else ledger
    for start in range(0, args.plain, step):
        notify.enqueue_many([{"seconds": args.seconds}] * min(step, args.plain - start))  # type: ignore[attr-defined]
        if atomic and start // step < atomic:
            atomic_job.enqueue({"seconds": atomic_seconds})  # type: ignore[attr-defined]
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
    plain_jobs = jobs.filter(name="bench.atomicapp.notify")
    plain_last = max(plain_jobs.values_list("finished_at", flat=True))
    last = max(jobs.values_list("finished_at", flat=True))
    plain_s = (plain_last - first).total_seconds()
    return {
        "label": label,
        "plain": args.plain,
        "atomic": atomic,
        "atomic_seconds": atomic_seconds,
        "not_done": not_done,
        "plain_drain_s": plain_s,
        "plain_per_s": args.plain / plain_s,
        "all_drain_s": (last - first).total_seconds(),
        "worker_command": "manage.py " + " ".join(command[2:]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plain", type=int, default=400)
    parser.add_argument("--atomic", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=0.05, help="each plain job's sleep")
    parser.add_argument(
        "--atomic-seconds", type=float, default=0.005, help="each atomic job's write and sleep"
    )
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
            drain(args, "own queue", args.atomic, []),
            drain(args, "one queue", args.atomic, [], beside=True),
            drain(args, "one slot", args.atomic, ["--concurrency", "1"]),
            drain(args, "own queue, long atomic", args.atomic, [], long=True),
        ]
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["finished"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    base = report["runs"][0]["plain_per_s"]
    for r in report["runs"]:
        print(
            f"{r['label']:<22} {r['plain']} plain of {args.seconds:g} s + {r['atomic']} atomic "
            f"of {r['atomic_seconds']:g} s: plain {r['plain_per_s']:,.0f}/s "
            f"({r['plain_per_s'] / base:.2f}x plain only), all drained in "
            f"{r['all_drain_s']:.2f} s, {r['not_done']} not done"
        )
    RESULTS.write_text(json.dumps(report, indent=2, default=str) + "\n")
    log(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
