"""The workloads, the same for every contender: enqueue N no-op jobs, drain them, time a trickle;
and drain N ORM jobs (read one row, write one row) where the contender has ORM worker setups.

``python -m bench.peerapps.workload KEY CONFIG_JSON`` runs one contender (``bench/peers.py``
starts it with the right interpreter) and prints one ``RESULT {json}`` line.
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.peerapps.harness import (
    Contender,
    Variant,
    Workers,
    children_cpu,
    log,
    servers_cpu,
    wait_for,
)

#: contender key -> "module:Class" (the module imports its library: the right venv only).
CONTENDERS = {
    "blamequeue-postgres": "bench.peerapps.blamequeue:BlameQueue",
    "blamequeue-redis": "bench.peerapps.blamequeue:BlameQueue",
    "blamequeue-sqlite": "bench.peerapps.blamequeue:BlameQueue",
    "procrastinate": "bench.peerapps.procrastinate_app:Procrastinate",
    "procrastinate-django": "bench.peerapps.procrastinate_django:ProcrastinateDjango",
    "django-tasks-db": "bench.peerapps.tasksdb:TasksDB",
    "celery": "bench.peerapps.celery_app:CeleryRedis",
    "rq": "bench.peerapps.rq_app:RQ",
}


class Run:
    """Drives one contender through the phases and collects its rows."""

    def __init__(self, contender: Contender) -> None:
        self.c = contender
        self.cfg = contender.cfg
        self.logdir = Path(self.cfg["logdir"])
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")]),
        }
        self.startup_s = 0.0

    def workers(self, variant: Variant, *, burst: bool, tag: str) -> Workers:
        commands = [self.c.worker_command(variant, i, burst=burst) for i in range(variant.procs)]
        env = {**self.env, **variant.options.get("env", {})}
        return Workers(commands, env, self.logdir, f"{self.c.key}-{variant.key}-{tag}")

    def startup(self, variant: Variant) -> float:
        """CPU seconds of one worker started and stopped on an empty queue."""
        one = Variant(variant.key, variant.label, 1, variant.options)
        self.c.reset()
        cpu0 = children_cpu()
        with self.workers(one, burst=self.c.burst, tag="startup") as w:
            if self.c.burst:
                w.wait(self.cfg["drain_timeout"])
            else:
                wait_for(lambda: self.c.ready_count() >= 1, 120, "the worker to be ready")
                w.stop()
        return children_cpu() - cpu0

    def single(self) -> tuple[list[str], dict[str, Any]]:
        n = self.cfg["n"]
        self.c.reset()
        t0 = time.perf_counter()
        ids = [self.c.enqueue_one(i) for i in range(n)]
        rate = n / (time.perf_counter() - t0)
        log(f"{self.c.key}: {n:,} single enqueues: {rate:,.0f}/s")
        return ids, {"jobs": n, "rate": rate}

    def bulk(self) -> tuple[list[str], dict[str, Any]]:
        n, batch = self.cfg["n"], self.cfg["batch"]
        self.c.reset()
        ids: list[str] = []
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            ids += self.c.enqueue_bulk(start, min(n, start + batch))
        rate = n / (time.perf_counter() - t0)
        log(f"{self.c.key}: {n:,} bulk enqueues in batches of {batch:,}: {rate:,.0f}/s")
        return ids, {"jobs": n, "batch": batch, "rate": rate}

    def drain(self, variant: Variant, ids: Sequence[str]) -> dict[str, Any]:
        n = len(ids)
        self.c.prepare_drain()
        cpu0, srv0, t0 = children_cpu(), servers_cpu(), time.perf_counter()
        with self.workers(variant, burst=self.c.burst, tag="drain") as w:
            if self.c.burst:
                w.wait(self.cfg["drain_timeout"])
            else:
                wait_for(
                    lambda: self.c.done_count(ids) >= n,
                    self.cfg["drain_timeout"],
                    f"{n} jobs to be done",
                    every=0.2,
                )
                w.stop()
        wall = time.perf_counter() - t0
        worker_cpu = children_cpu() - cpu0 - variant.procs * self.startup_s
        srv1 = servers_cpu()
        server = {k: srv1[k] - srv0[k] for k in srv1}
        done = self.c.done_count(ids)
        if done != n:
            raise RuntimeError(f"{self.c.key}/{variant.key}: {done} of {n} jobs done")
        win = self.c.window(ids)
        out = {
            "jobs": win.jobs,
            "seconds": win.last - win.first,
            "rate": win.rate,
            "wall": wall,
            "procs": variant.procs,
            "worker_cpu_us": 1e6 * worker_cpu / n,
            "server_cpu_us": {k: 1e6 * v / n for k, v in server.items()},
        }
        log(
            f"{self.c.key}/{variant.key}: drained {n:,} in {out['seconds']:.2f} s = "
            f"{win.rate:,.0f}/s (wall {wall:.1f} s; worker CPU {out['worker_cpu_us']:,.0f} µs/job)"
        )
        return out

    def latency(self, variant: Variant) -> dict[str, Any]:
        count, interval = self.cfg["latency_jobs"], self.cfg["latency_interval"]
        self.c.reset()
        with self.workers(variant, burst=False, tag="latency") as w:
            warm = [self.c.enqueue_one(-1 - i) for i in range(20)]
            wait_for(lambda: self.c.done_count(warm) >= 20, 120, "the warm-up jobs", every=0.2)
            time.sleep(1.5)  # idle on purpose: the workers wait the way they wait in production
            ids: list[str] = []
            sent: dict[str, float] = {}
            next_at = time.perf_counter()
            for i in range(count):
                at = time.time()
                job_id = self.c.enqueue_one(i)
                sent[job_id] = at
                ids.append(job_id)
                next_at += interval
                time.sleep(max(0.0, next_at - time.perf_counter()))
            every = warm + ids
            wait_for(lambda: self.c.done_count(every) >= len(every), 120, "the latency jobs")
            w.stop()
        ms = sorted(self.c.latencies(ids, sent))
        q = statistics.quantiles(ms, n=100, method="inclusive")
        log(f"{self.c.key}/{variant.key}: enqueue→start p50 {q[49]:.1f} ms, p99 {q[98]:.1f} ms")
        return {
            "jobs": count,
            "interval_ms": interval * 1000,
            "p50": q[49],
            "p90": q[89],
            "p99": q[98],
            "min": ms[0],
            "max": ms[-1],
            "samples": ms,
        }

    def orm(self, variant: Variant) -> dict[str, Any]:
        """The ORM workload: N ORM jobs enqueued in bulk, drained, every entry checked."""
        n, batch = self.cfg["orm_n"], self.cfg["batch"]
        self.c.reset()
        self.c.prepare_orm()
        ids: list[str] = []
        for start in range(0, n, batch):
            ids += self.c.enqueue_orm_bulk(start, min(n, start + batch))
        out = self.drain(variant, ids)
        written = self.c.orm_entries()
        if written != n:
            raise RuntimeError(f"{self.c.key}/{variant.key}: {written} entries for {n} ORM jobs")
        return out

    def run(self) -> dict[str, Any]:
        workloads = self.cfg.get("workloads", ["noop"])
        rows = []
        for k, variant in enumerate(self.c.variants if "noop" in workloads else ()):
            self.startup_s = self.startup(variant)
            log(
                f"{self.c.key}/{variant.key}: one worker started and stopped on an empty queue: "
                f"{self.startup_s:.2f} s CPU"
            )
            row: dict[str, Any] = {
                "variant": variant.key,
                "label": variant.label,
                "worker_startup_cpu_s": self.startup_s,
            }
            if k == 0:
                ids, row["single"] = self.single()
                if self.c.bulk_api is not None:
                    ids, row["bulk"] = self.bulk()
            elif self.c.bulk_api is not None:
                ids, _ = self.bulk()
            else:
                ids, _ = self.single()
            row["drain"] = self.drain(variant, ids)
            row["latency"] = self.latency(variant)
            rows.append(row)
        orm_rows = []
        for variant in self.c.orm_variants if "orm" in workloads else ():
            self.startup_s = self.startup(variant)
            orm_rows.append(
                {
                    "variant": variant.key,
                    "label": variant.label,
                    "worker_startup_cpu_s": self.startup_s,
                    "drain": self.orm(variant),
                }
            )
        self.c.reset()
        return {**self.c.describe(), "rows": rows, "orm_rows": orm_rows}


def main(argv: list[str]) -> int:
    key, cfg = argv[0], json.loads(argv[1])
    module, name = CONTENDERS[key].split(":")
    cls = getattr(importlib.import_module(module), name)
    result = Run(cls({**cfg, "key": key})).run()
    print("RESULT " + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
