#!/usr/bin/env python
"""The sqs backend on moto_server: throughput, and what its ledger costs (not a test).

    .venv/bin/python bench/sqs.py [--n 2000] [--ledger sqlite|postgres|both] [--workers 2]

moto is an emulator written in Python, on this same machine: its figures are relative (a
real SQS answers in milliseconds over the network, and scales out). What they do show is
the share of each job's time and work that the ledger adds. Per ledger database:

1. ``enqueue_many`` in batches of 100, and single ``enqueue`` calls: jobs/s;
2. a drain of N no-op jobs by ``--workers`` ``runworker --burst --no-sweep`` processes:
   jobs/s from the first claim to the last ack (the ledger's ``started_at`` / ``finished_at``);
3. the ledger's cost: single-enqueued jobs claimed and acked 10 at a time through the
   backend's verbs in this process, with every ledger statement timed (Django's
   ``execute_wrapper``) and every SQS call counted (botocore's events): statements, SQS
   calls, ledger ms and total ms per job.

Each ledger runs in a child process with ``bench.sqs_settings`` (a fresh moto_server, a
fresh SQLite file or PostgreSQL cluster). Writes ``bench/results/sqs-latest.json`` and prints
the Markdown table that docs/backends/sqs.md quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results" / "sqs-latest.json"


def log(message: str) -> None:
    print(f"[bench-sqs {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ============================================================================ child side
class Ledger:
    """Times every statement on the ledger's connection (``execute_wrapper``)."""

    def __init__(self) -> None:
        self.statements = 0
        self.seconds = 0.0

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any
    ) -> Any:
        start = time.perf_counter()
        try:
            return execute(sql, params, many, ctx)
        finally:
            self.seconds += time.perf_counter() - start
            self.statements += 1


@contextmanager
def measured(backend: Any) -> Iterator[tuple[Ledger, Counter[str]]]:
    """The ledger's statements and time, and the SQS calls by operation, inside the block."""
    from django.db import connections

    ledger, calls = Ledger(), Counter[str]()

    def count(event_name: str, **_: Any) -> None:
        calls[event_name.rsplit(".", 1)[-1]] += 1

    events = backend.transport.client.meta.events
    events.register("before-call.sqs", count)
    try:
        with connections[backend.db].execute_wrapper(ledger):
            yield ledger, calls
    finally:
        events.unregister("before-call.sqs", count)


def child(cfg: dict[str, Any]) -> dict[str, Any]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.sqs_settings")
    import django

    django.setup()
    from django.core.management import call_command

    from bench.jobs import NOOP, QUEUE
    from django_blamequeue import queue
    from django_blamequeue.backends import get_backend
    from django_blamequeue.core.records import Ack, Transition
    from django_blamequeue.core.states import State

    call_command("migrate", verbosity=0)
    backend: Any = get_backend()
    n, out = cfg["n"], {"ledger": cfg["ledger"], "n": cfg["n"]}

    # 1. enqueues
    start = time.perf_counter()
    for _ in range(n // 100):
        queue.enqueue_many(QUEUE, [{}] * 100, name=NOOP)
    out["enqueue_many_per_s"] = n / (time.perf_counter() - start)
    # 2. the drain by worker processes
    out["drain_per_s"] = drain(backend, cfg, n)
    # 1b and 3. single enqueues, then claims and acks with the ledger measured
    m = cfg["single"]
    with measured(backend) as (ledger, calls):
        start = time.perf_counter()
        for _ in range(m):
            queue.enqueue(QUEUE, {}, name=NOOP)
        took = time.perf_counter() - start
    out["single_per_s"] = m / took
    out["enqueue_cost"] = cost(ledger, calls, took, m)
    done = Transition(state=State.DONE)
    with measured(backend) as (ledger, calls):
        start, finished = time.perf_counter(), 0
        while finished < m:
            claimed = backend.claim([QUEUE], 10, 30)
            backend.apply_many(
                [Ack(job_id=c.job_id, token=c.token, transition=done) for c in claimed]
            )
            finished += len(claimed)
        took = time.perf_counter() - start
    out["claim_ack_cost"] = cost(ledger, calls, took, m)
    return out


def cost(ledger: Ledger, calls: Counter[str], seconds: float, jobs: int) -> dict[str, Any]:
    return {
        "ledger_statements_per_job": ledger.statements / jobs,
        "ledger_ms_per_job": ledger.seconds * 1000 / jobs,
        "total_ms_per_job": seconds * 1000 / jobs,
        "sqs_calls_per_job": sum(calls.values()) / jobs,
        "sqs_calls": dict(calls),
    }


def drain(backend: Any, cfg: dict[str, Any], n: int) -> float:
    from django.db.models import Max, Min

    procs = [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "django", "runworker", "bench", "--burst"),
                *("--no-sweep", "--concurrency", str(cfg["concurrency"])),
            ],
            cwd=ROOT,
            env=os.environ.copy(),
            stdout=subprocess.DEVNULL,
        )
        for _ in range(cfg["workers"])
    ]
    for p in procs:
        if p.wait(timeout=1800) != 0:
            raise SystemExit(f"a worker exited with {p.returncode}")
    done = backend.jobtable.jobs().filter(state="done")
    assert done.count() == n, f"{done.count()} of {n} done"
    window = done.aggregate(a=Min("started_at"), b=Max("finished_at"))
    return n / (window["b"] - window["a"]).total_seconds()


# ============================================================================ driver side
def run_ledger(kind: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from tests.servers import MotoServer, PostgresServer

    moto = MotoServer(tmp / f"moto-{kind}")
    moto.start()
    pg = None
    try:
        if kind == "postgres":
            pg = PostgresServer(tmp / "pg")
            pg.start()
            url = pg.url
        else:
            url = f"sqlite:///{tmp / 'bench-sqs.sqlite3'}"
        env = os.environ | {
            "DJANGO_SETTINGS_MODULE": "bench.sqs_settings",
            "BENCH_DATABASE_URL": url,
            "BENCH_SQS_URL": moto.url,
            "PYTHONPATH": str(ROOT),
        }
        cfg = {"ledger": kind, "n": args.n, "single": args.single}
        cfg |= {"workers": args.workers, "concurrency": args.concurrency}
        log(f"ledger on {kind}: {args.n} jobs, {args.workers} workers × {args.concurrency}")
        done = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(cfg)],
            env=env,
            cwd=ROOT,
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result
    finally:
        moto.stop()
        if pg is not None:
            pg.stop()


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| ledger | enqueue_many jobs/s | single enqueues/s | drain jobs/s "
        "| enqueue: statements, SQS calls, ledger ms / total ms per job "
        "| claim+ack: statements, SQS calls, ledger ms / total ms per job |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    for r in results:
        e, c = r["enqueue_cost"], r["claim_ack_cost"]

        def cell(x: dict[str, Any]) -> str:
            return (
                f"{x['ledger_statements_per_job']:.2f}, {x['sqs_calls_per_job']:.2f}, "
                f"{x['ledger_ms_per_job']:.2f} / {x['total_ms_per_job']:.2f}"
            )

        rows.append(
            f"| {r['ledger']} | {r['enqueue_many_per_s']:,.0f} | {r['single_per_s']:,.0f} "
            f"| {r['drain_per_s']:,.0f} | {cell(e)} | {cell(c)} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="jobs enqueued and drained")
    parser.add_argument("--single", type=int, default=500, help="single enqueues (and acks)")
    parser.add_argument("--ledger", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    kinds = ["sqlite", "postgres"] if args.ledger == "both" else [args.ledger]
    with tempfile.TemporaryDirectory(prefix="bench-sqs-") as tmp:
        results = [run_ledger(kind, args, Path(tmp)) for kind in kinds]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M")
    RESULTS.write_text(json.dumps({"when": stamp, "results": results}, indent=2) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
