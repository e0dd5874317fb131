#!/usr/bin/env python
"""Durable workflows on PostgreSQL (not a test): step overhead and parked workflows.

    .venv/bin/python bench/workflows.py [--workflows 200] [--steps 20] [--parked 10000]
                                        [--concurrency 8]

It starts its own PostgreSQL (``tests.servers``, fsync on), creates a fresh database, migrates
and runs, in this process with one ``queue.consume`` worker of ``--concurrency`` slots:

1. *steps/s*: ``--workflows`` workflows of ``--steps`` steps each whose function does nothing
   (plain ``ctx.step``; then ``ctx.atomic_step``, whose function inserts one row), from the
   first claim to the last ack, against the same jobs with no steps at all (the floor);
2. *parked*: ``--parked`` workflows that each record one step and ``ctx.sleep(86400)``: the
   time to park them all, the slots they hold once parked (the worker's running count), the
   rows and bytes they cost (job table and step table, ``pg_total_relation_size``), and the
   claim of a plain job beside them (median of 200 claims) against an empty table.

It prints a table and writes ``bench/results/workflows.json``; docs/workflows.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULT = ROOT / "bench" / "results" / "workflows.json"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def setup(url: str) -> None:
    os.environ["BENCH_DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def define_jobs() -> dict[str, Any]:
    from django.db import connection

    from django_blamequeue import current_job, job

    def nothing(i: int) -> int:
        return i

    def insert(i: int) -> int:
        with connection.cursor() as cur:
            cur.execute("INSERT INTO bench_step_write (n) VALUES (%s)", [i])
        return i

    @job(queue="wf-plain", name="bench.wf_plain", durable=True)
    def plain(payload: dict[str, int]) -> int:
        ctx = current_job()
        return sum(ctx.step(f"s{i}", nothing, i) for i in range(payload["steps"]))

    @job(queue="wf-atomic", name="bench.wf_atomic", durable=True)
    def atomic(payload: dict[str, int]) -> int:
        ctx = current_job()
        return sum(ctx.atomic_step(f"s{i}", insert, i) for i in range(payload["steps"]))

    @job(queue="wf-floor", name="bench.wf_floor", durable=True)
    def floor(payload: dict[str, int]) -> int:
        return 0

    @job(queue="wf-parked", name="bench.wf_parked", durable=True)
    def parked(payload: Any) -> None:
        ctx = current_job()
        ctx.step("ordered", nothing, 1)
        ctx.sleep(86400)

    @job(queue="wf-probe", name="bench.wf_probe")
    def probe(payload: Any) -> None:
        return None

    with connection.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS bench_step_write (id bigserial, n int)")
    return {"plain": plain, "atomic": atomic, "floor": floor, "parked": parked, "probe": probe}


def sql(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(statement, params or [])
        return list(cur.fetchall())


def vacuum() -> None:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")


def drain(queue_name: str, n: int, concurrency: int) -> float:
    """Run ``queue_name`` with one consumer until ``n`` of its jobs are done: the seconds."""
    from django_blamequeue import queue
    from django_blamequeue.models import Job

    started = time.perf_counter()
    consumer = queue.consume(queue_name, concurrency=concurrency, poll_interval=0.05)
    try:
        while Job.objects.filter(queue=queue_name, state="done").count() < n:
            time.sleep(0.05)
        return time.perf_counter() - started
    finally:
        consumer.cancel()
        consumer.join()


def steps_per_second(jobs: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    total = args.workflows * args.steps
    for kind in ("floor", "plain", "atomic"):
        jobs[kind].enqueue_many([{"steps": args.steps}] * args.workflows)
        elapsed = drain(f"wf-{kind}", args.workflows, args.concurrency)
        out[kind] = {"s": round(elapsed, 2), "workflows_per_s": round(args.workflows / elapsed, 1)}
        if kind != "floor":
            out[kind]["steps_per_s"] = round(total / elapsed)
            spent = elapsed - out["floor"]["s"]
            out[kind]["ms_per_step"] = round(1000 * max(spent, 0.0) / total, 3)
        log(f"{kind}: {out[kind]}")
    return out


def parked_cost(jobs: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from django_blamequeue import queue
    from django_blamequeue.backends import get_backend

    backend = get_backend("default")

    def size(table: str) -> int:
        return int(sql("SELECT pg_total_relation_size(%s)", [table])[0][0])

    def claim_ms() -> float:
        times = []
        for _ in range(200):
            jobs["probe"].enqueue(None)
            t = time.perf_counter()
            [claimed] = backend.claim(["wf-probe", "wf-parked"], 1, 30)
            times.append((time.perf_counter() - t) * 1000)
            backend.apply_many([])  # nothing: the probe stays leased, out of the way
            assert claimed.queue == "wf-probe"
        return round(statistics.median(times), 3)

    vacuum()
    before = {t: size(t) for t in ("blamequeue_job", "blamequeue_workflow_step")}
    claim_before = claim_ms()
    for start in range(0, args.parked, 1000):
        jobs["parked"].enqueue_many([None] * min(1000, args.parked - start))
    waiting = "SELECT count(*) FROM blamequeue_workflow_step WHERE status='waiting'"
    started = time.perf_counter()
    consumer = queue.consume("wf-parked", concurrency=args.concurrency, poll_interval=0.05)
    try:
        # every workflow records its step and parks: none is claimable for a day
        while int(sql(waiting)[0][0]) < args.parked:
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        time.sleep(1.0)  # the last parks' acks land
        held = consumer.in_flight  # the slots the live worker holds
        log(f"parked {args.parked} in {elapsed:.1f} s; the worker holds {held} slot(s)")
    finally:
        consumer.cancel()
        consumer.join()
    vacuum()
    after = {t: size(t) for t in before}
    claim_after = claim_ms()
    steps = int(
        sql(
            "SELECT count(*) FROM blamequeue_workflow_step s JOIN blamequeue_job j "
            "ON j.id = s.job_id WHERE j.queue = 'wf-parked'"
        )[0][0]
    )
    rows = int(sql("SELECT count(*) FROM blamequeue_job WHERE queue = 'wf-parked'")[0][0])
    due = int(
        sql(
            "SELECT count(*) FROM blamequeue_job WHERE queue = 'wf-parked' AND state = 'pending' "
            "AND available_at <= now()"
        )[0][0]
    )
    return {
        "workflows": args.parked,
        "park_s": round(elapsed, 2),
        "parked_per_s": round(args.parked / elapsed),
        "slots_held_after": held,
        "job_rows": rows,
        "due_now": due,
        "step_rows": steps,
        "job_table_bytes_per_workflow": round(
            (after["blamequeue_job"] - before["blamequeue_job"]) / args.parked
        ),
        "step_table_bytes_per_workflow": round(
            (after["blamequeue_workflow_step"] - before["blamequeue_workflow_step"]) / args.parked
        ),
        "claim_ms_empty": claim_before,
        "claim_ms_beside_parked": claim_after,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=200)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--parked", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    from tests.servers import PostgresServer

    report: dict[str, Any] = {
        "command": "bench/workflows.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
    }
    with tempfile.TemporaryDirectory(prefix="bq-bench-wf-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)
        server = PostgresServer(base / "pg")
        log("PostgreSQL: starting a throwaway server (fsync on)")
        server.start()
        try:
            import psycopg

            with psycopg.connect(server.url, autocommit=True) as conn:
                conn.execute("CREATE DATABASE bench_wf")
            setup(server.url.rsplit("/", 1)[0] + "/bench_wf")
            jobs = define_jobs()
            report["steps"] = steps_per_second(jobs, args)
            report["parked"] = parked_cost(jobs, args)
        finally:
            from django.db import connections

            connections.close_all()
            server.stop()
    print(json.dumps(report, indent=2))
    RESULT.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
