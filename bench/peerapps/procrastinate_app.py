"""Procrastinate with its plain psycopg connector, on its own PostgreSQL database.

Runs in the peers' venv. ``app`` is what the worker command loads
(``procrastinate --app bench.peerapps.procrastinate_app.app worker``); the database comes from
``BENCH_PROCRASTINATE_DSN``. Procrastinate records every transition in ``procrastinate_events``
with the database's ``now()``, which is what the drain window and the latency are read from.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import procrastinate
import psycopg

from bench.peerapps.harness import Contender, Variant, Window

DSN = os.environ.get("BENCH_PROCRASTINATE_DSN", "")
QUEUE = "bench"

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=DSN))


@app.task(queue=QUEUE, name="bench.noop")
def noop(i: int) -> None:
    return None


@app.task(queue=QUEUE, name="bench.stamped")
def stamped(t: float, p: int) -> None:
    from bench.peerapps.probe import started

    started(t, p)


class Procrastinate(Contender):
    key = "procrastinate"
    label = "Procrastinate"
    storage = "PostgreSQL"
    single_api = "`task.defer(…)`"
    bulk_api = "`task.batch_defer(…)`"
    drain_method = (
        "first `started` to last `succeeded` event in `procrastinate_events` (the database clock)"
    )
    latency_method = "`started` event − `deferred` event, both the database clock"

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        self.conn = psycopg.connect(DSN, autocommit=True)
        app.open()
        installed = self.conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
        if installed is None or installed[0] is None:
            app.schema_manager.apply_schema()
        k = cfg["concurrency"]
        self.variants: tuple[Variant, ...] = (
            Variant("2", f"2 × `procrastinate worker --concurrency {k}`", 2, {"concurrency": k}),
        )
        if k != 10:  # the peers page compares default runworkers with Procrastinate at 10
            self.variants += (
                Variant(
                    "c10", "2 × `procrastinate worker --concurrency 10`", 2, {"concurrency": 10}
                ),
            )

    def reset(self) -> None:
        self.conn.execute("TRUNCATE procrastinate_jobs, procrastinate_events CASCADE")

    def prepare_drain(self) -> None:
        self.conn.execute("ANALYZE procrastinate_jobs")

    def enqueue_one(self, i: int) -> str:
        return str(noop.defer(i=i))

    def enqueue_bulk(self, start: int, stop: int) -> list[str]:
        return [str(j) for j in noop.batch_defer(*({"i": i} for i in range(start, stop)))]

    def enqueue_stamped(self, phase: int, count: int) -> None:
        stamp = {"t": time.time(), "p": phase}
        if count == 1:
            stamped.defer(**stamp)
        else:
            stamped.batch_defer(*([stamp] * count))

    def worker_command(self, variant: Variant, index: int, *, burst: bool) -> list[str]:
        command = [
            str(Path(sys.executable).parent / "procrastinate"),
            "--app",
            "bench.peerapps.procrastinate_app.app",
            "--log-level",
            "warning",  # no line per job (every contender runs with per-job logging off)
            "worker",
            "--queues",
            QUEUE,
            "--concurrency",
            str(variant.options["concurrency"]),
            "--name",
            f"bench-{index}",
        ]
        return [*command, "--one-shot"] if burst else command

    def done_count(self, ids: Sequence[str]) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        ).fetchone()
        return int(row[0]) if row else 0

    def window(self, ids: Sequence[str]) -> Window:
        row = self.conn.execute(
            "SELECT count(*) FILTER (WHERE type = 'succeeded'), "
            "min(at) FILTER (WHERE type = 'started'), max(at) FILTER (WHERE type = 'succeeded') "
            "FROM procrastinate_events"
        ).fetchone()
        assert row is not None
        return Window(int(row[0]), row[1].timestamp(), row[2].timestamp())

    def latencies(self, ids: Sequence[str], sent: dict[str, float]) -> list[float]:
        rows = self.conn.execute(
            "SELECT d.at, s.at FROM procrastinate_events d JOIN procrastinate_events s "
            "ON s.job_id = d.job_id AND s.type = 'started' "
            "WHERE d.type = 'deferred' AND d.job_id = ANY(%s)",
            [[int(i) for i in ids]],
        ).fetchall()
        return [(s - d).total_seconds() * 1000 for d, s in rows]

    def versions(self) -> dict[str, str]:
        return {n: version(n) for n in ("procrastinate", "psycopg", "psycopg-pool")}
