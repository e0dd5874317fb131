"""Celery with a Redis broker and no result backend (``task_ignore_result``).

Runs in the peers' venv; ``celery -A bench.peerapps.celery_app worker`` loads ``app``. With no
result backend Celery keeps no timestamps, so the worker processes record their own: the
``task_prerun`` / ``task_postrun`` signals update counters in memory (first start, last finish,
count; the start time of each task id for the latency phase), which a daemon thread writes to
``BENCH_CELERY_RECORD_DIR/<pid>.json`` every 50 ms and once more at shutdown. No Redis call is
added per task. Celery has no burst mode: the benchmark stops its workers (SIGTERM, Celery's
warm shutdown) once the recorded count reaches N.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import redis
from celery import Celery, group
from celery.signals import (
    task_postrun,
    task_prerun,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

from bench.peerapps.harness import Contender, Variant, Window

QUEUE = "bench"
BROKER = os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/2")
RECORD_DIR = Path(os.environ.get("BENCH_CELERY_RECORD_DIR", "/tmp/bench-celery"))
ORM_SETTINGS = "bench.peerapps.orm_peer_settings"

app = Celery("bench", broker=BROKER)
app.conf.update(
    task_ignore_result=True,
    result_backend=None,
    task_default_queue=QUEUE,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=True,
)


@app.task(name="bench.noop")
def noop(i: int) -> None:
    return None


@app.task(name="bench.stamped")
def stamped(t: float, p: int) -> None:
    from bench.peerapps.probe import started

    started(t, p)


@app.task(name="bench.orm")
def orm(i: int) -> None:
    """The ORM workload's job; its workers run with ``DJANGO_SETTINGS_MODULE`` set, so Celery's
    Django fix-up sets Django up and closes the task's connections around every task."""
    from bench.ormapp.work import read_write

    read_write(i)


class _Recorder:
    """Per worker process: counters in memory, written to a file off the task's path."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.first: float | None = None
        self.last: float | None = None
        self.starts: dict[str, float] = {}
        self.pid = 0

    def started(self, task_id: str) -> None:
        now = time.time()
        with self.lock:
            if self.pid != os.getpid():  # first task of this process (prefork: of this child)
                self.pid = os.getpid()
                threading.Thread(target=self._loop, daemon=True).start()
            if self.first is None or now < self.first:
                self.first = now
            self.starts[task_id] = now

    def finished(self) -> None:
        now = time.time()
        with self.lock:
            self.count += 1
            if self.last is None or now > self.last:
                self.last = now

    def write(self, *, starts: bool) -> None:
        with self.lock:
            data: dict[str, Any] = {"count": self.count, "first": self.first, "last": self.last}
            if starts:
                data["starts"] = dict(self.starts)
        if not self.pid:
            return
        path = RECORD_DIR / f"{self.pid}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)

    def _loop(self) -> None:
        seen = -1
        while True:
            time.sleep(0.05)
            if self.count != seen:
                seen = self.count
                self.write(starts=False)


RECORDER = _Recorder()


@task_prerun.connect
def _prerun(task_id: str, **kwargs: Any) -> None:
    RECORDER.started(task_id)


@task_postrun.connect
def _postrun(**kwargs: Any) -> None:
    RECORDER.finished()


@worker_ready.connect
def _ready(**kwargs: Any) -> None:
    (RECORD_DIR / f"ready-{os.getpid()}").touch()


@worker_shutdown.connect
@worker_process_shutdown.connect
def _shutdown(**kwargs: Any) -> None:
    RECORDER.write(starts=True)


class CeleryRedis(Contender):
    key = "celery"
    label = "Celery (Redis broker)"
    storage = "Redis"
    single_api = "`task.delay(…)`"
    bulk_api = "`group(…).apply_async()`"
    drain_method = (
        "first `task_prerun` to last `task_postrun` signal, recorded in memory by the worker "
        "processes (Celery keeps no timestamps without a result backend)"
    )
    latency_method = (
        "`task_prerun` time in the worker − the time just before `delay()` in the "
        "enqueuing process (one machine, one clock)"
    )
    burst = False
    orm_method = (
        "`@app.task` calling `read_write(i)`; workers started with `DJANGO_SETTINGS_MODULE`, so "
        "Celery's Django fix-up sets Django up and closes the connections before and after each "
        "task (`close_if_unusable_or_obsolete`)"
    )

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        self.redis = redis.Redis.from_url(BROKER)
        RECORD_DIR.mkdir(parents=True, exist_ok=True)
        k = cfg["concurrency"]
        orm_k = cfg.get("orm_concurrency", 10)
        env = {"DJANGO_SETTINGS_MODULE": ORM_SETTINGS}
        self.orm_variants = (
            Variant(
                f"orm-threads-{orm_k}",
                f"2 × `celery worker --pool threads --concurrency {orm_k}`",
                2,
                {"pool": "threads", "concurrency": orm_k, "env": env},
            ),
            Variant(
                f"orm-prefork-{orm_k}",
                f"2 × `celery worker --pool prefork --concurrency {orm_k}`",
                2,
                {"pool": "prefork", "concurrency": orm_k, "env": env},
            ),
        )
        self.variants = (
            Variant(
                "threads",
                f"2 × `celery worker --pool threads --concurrency {k}`",
                2,
                {"pool": "threads", "concurrency": k},
            ),
            Variant(
                "prefork",
                "2 × `celery worker --pool prefork --concurrency 2` (its default pool: "
                "2 child processes each)",
                2,
                {"pool": "prefork", "concurrency": 2},
            ),
        )

    def reset(self) -> None:
        self.redis.flushdb()
        for path in RECORD_DIR.iterdir():
            path.unlink()

    # -- the ORM workload ------------------------------------------------------------------
    def prepare_orm(self) -> None:
        """Django in this process too (``orm_peer_settings``), to seed and count entries."""
        if os.environ.get("DJANGO_SETTINGS_MODULE") != ORM_SETTINGS:
            os.environ["DJANGO_SETTINGS_MODULE"] = ORM_SETTINGS
            import django

            django.setup()
            from django.core.management import call_command

            call_command("migrate", verbosity=0, interactive=False)
        from bench.ormapp import work

        work.seed()
        work.reset()

    def enqueue_orm_bulk(self, start: int, stop: int) -> list[str]:
        result = group(orm.s(i) for i in range(start, stop)).apply_async()
        return [str(r.id) for r in result.results]

    def orm_entries(self) -> int:
        from bench.ormapp import work

        return work.entries()

    def enqueue_one(self, i: int) -> str:
        return str(noop.delay(i).id)

    def enqueue_bulk(self, start: int, stop: int) -> list[str]:
        result = group(noop.s(i) for i in range(start, stop)).apply_async()
        return [str(r.id) for r in result.results]

    def enqueue_stamped(self, phase: int, count: int) -> None:
        t = time.time()
        if count == 1:
            stamped.delay(t, phase)
        else:
            group(stamped.s(t, phase) for _ in range(count)).apply_async()

    def worker_command(self, variant: Variant, index: int, *, burst: bool) -> list[str]:
        return [
            str(Path(sys.executable).parent / "celery"),
            "-A",
            "bench.peerapps.celery_app",
            "worker",
            "--queues",
            QUEUE,
            "--pool",
            variant.options["pool"],
            "--concurrency",
            str(variant.options["concurrency"]),
            "--hostname",
            f"bench{index}@%h",
            "--loglevel",
            "WARNING",  # no line per task (every contender runs with per-job logging off)
        ]

    def _records(self) -> list[dict[str, Any]]:
        out = []
        for path in RECORD_DIR.glob("[0-9]*.json"):
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return out

    def ready_count(self) -> int:
        return len(list(RECORD_DIR.glob("ready-*")))

    def done_count(self, ids: Sequence[str]) -> int:
        return sum(r["count"] for r in self._records())

    def window(self, ids: Sequence[str]) -> Window:
        records = [r for r in self._records() if r["count"]]
        return Window(
            sum(r["count"] for r in records),
            min(r["first"] for r in records),
            max(r["last"] for r in records),
        )

    def latencies(self, ids: Sequence[str], sent: dict[str, float]) -> list[float]:
        starts: dict[str, float] = {}
        for r in self._records():
            starts.update(r.get("starts", {}))
        return [(starts[i] - sent[i]) * 1000 for i in ids]

    def versions(self) -> dict[str, str]:
        return {n: version(n) for n in ("celery", "kombu", "redis")}
