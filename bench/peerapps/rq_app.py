"""RQ on Redis: ``rq worker`` processes, the job function ``noop`` of this module.

Runs in the peers' venv. RQ's default ``Worker`` forks a work horse for every job and runs one
job at a time per process; ``SimpleWorker`` runs the job in the worker process itself. RQ keeps
``enqueued_at``, ``started_at`` and ``ended_at`` in each job's hash (the clocks of the enqueuing
process and of the worker, one machine), and finished jobs for ``result_ttl`` (500 s).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import redis
from rq import Queue
from rq.job import Job
from rq.registry import FinishedJobRegistry

from bench.peerapps.harness import Contender, Variant, Window

URL = os.environ.get("BENCH_RQ_URL", "redis://127.0.0.1:6379/3")
QUEUE = "bench"


def noop(i: int) -> None:
    return None


def stamped(t: float, p: int) -> None:
    from bench.peerapps.probe import started

    started(t, p)


def _epoch(value: datetime) -> float:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


class RQ(Contender):
    key = "rq"
    label = "RQ"
    storage = "Redis"
    single_api = "`queue.enqueue(…)`"
    bulk_api = "`queue.enqueue_many(…)` (one pipeline)"
    drain_method = "first `started_at` to last `ended_at` in the jobs' hashes (the workers' clocks)"
    latency_method = (
        "`started_at − enqueued_at` of each job (the enqueuing and the worker process's "
        "clock, one machine)"
    )
    variants = (
        Variant("2", "2 × `rq worker` (forks a work horse per job)", 2, {"cls": None}),
        Variant("4", "4 × `rq worker`", 4, {"cls": None}),
        Variant(
            "simple",
            "2 × `rq worker -w rq.worker.SimpleWorker` (no fork)",
            2,
            {"cls": "rq.worker.SimpleWorker"},
        ),
    )

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        self.redis = redis.Redis.from_url(URL)
        self.queue = Queue(QUEUE, connection=self.redis)

    def reset(self) -> None:
        self.redis.flushdb()

    def enqueue_one(self, i: int) -> str:
        return str(self.queue.enqueue(noop, i).id)

    def enqueue_bulk(self, start: int, stop: int) -> list[str]:
        jobs = self.queue.enqueue_many([Queue.prepare_data(noop, (i,)) for i in range(start, stop)])
        return [str(j.id) for j in jobs]

    def enqueue_stamped(self, phase: int, count: int) -> None:
        t = time.time()
        if count == 1:
            self.queue.enqueue(stamped, t, phase)
        else:
            self.queue.enqueue_many([Queue.prepare_data(stamped, (t, phase))] * count)

    def worker_command(self, variant: Variant, index: int, *, burst: bool) -> list[str]:
        command = [
            str(Path(sys.executable).parent / "rq"),
            "worker",
            QUEUE,
            "--url",
            URL,
            "--name",
            f"bench-{variant.key}-{index}-{os.getpid()}",
            "--logging_level",
            "WARNING",  # no line per job (every contender runs with per-job logging off)
        ]
        if variant.options["cls"]:
            command += ["--worker-class", variant.options["cls"]]
        return [*command, "--burst"] if burst else command

    def _jobs(self, ids: Sequence[str]) -> list[Job]:
        out: list[Job] = []
        for k in range(0, len(ids), 1000):
            out += [j for j in Job.fetch_many(list(ids[k : k + 1000]), connection=self.redis) if j]
        return out

    def done_count(self, ids: Sequence[str]) -> int:
        return FinishedJobRegistry(queue=self.queue).count

    def window(self, ids: Sequence[str]) -> Window:
        jobs = [j for j in self._jobs(ids) if j.ended_at is not None and j.started_at is not None]
        return Window(
            len(jobs),
            min(_epoch(j.started_at) for j in jobs),  # type: ignore[arg-type]
            max(_epoch(j.ended_at) for j in jobs),  # type: ignore[arg-type]
        )

    def latencies(self, ids: Sequence[str], sent: dict[str, float]) -> list[float]:
        return [
            (_epoch(j.started_at) - _epoch(j.enqueued_at)) * 1000  # type: ignore[arg-type]
            for j in self._jobs(ids)
        ]

    def versions(self) -> dict[str, str]:
        return {n: version(n) for n in ("rq", "redis")}
