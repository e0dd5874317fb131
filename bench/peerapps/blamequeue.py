"""django-blamequeue itself, on PostgreSQL (local backend) or on Redis (``BENCH_REDIS_URL``).

Runs in the project's .venv with ``bench.orm_settings`` (the settings ``bench/throughput.py``
uses: JSON payloads, AUDIT "operations", so the happy path writes no audit row; plus the ORM
workload's app, ``bench/ormapp``) and the no-op job of ``bench.jobs``. Workers: ``manage.py
runworker bench --no-sweep --concurrency K``, and on PostgreSQL also with no ``--concurrency``
(the command's default: what "out of the box" means). The ORM job is ``bench.ormapp.jobs.orm``
with Django's default ``CONN_MAX_AGE=0``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from bench.peerapps.harness import ROOT, Contender, Variant, Window

MANAGE = ROOT / "testproject" / "manage.py"


class BlameQueue(Contender):
    single_api = "`queue.enqueue(…)`"
    bulk_api = "`queue.enqueue_many(…)`"

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.orm_settings"
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        call_command("migrate", verbosity=0, interactive=False)
        self.connection = connection
        self.redis_url = os.environ.get("BENCH_REDIS_URL", "")
        k = cfg["concurrency"]
        self.key = cfg["key"]
        if self.redis_url:
            import redis

            self.redis = redis.Redis.from_url(self.redis_url)
            self.label = "django-blamequeue (Redis)"
            self.storage = "Redis"
            self.drain_method = (
                "first `started_at` to last `finished_at` of the jobs (Redis `TIME` at claim "
                "and at ack), read with `queue.get_job`"
            )
            self.latency_method = "`started_at − created_at`, both Redis `TIME`"
        else:
            self.storage = "PostgreSQL" if connection.vendor == "postgresql" else "SQLite"
            self.label = f"django-blamequeue ({self.storage})"
            self.drain_method = (
                "`min(started_at)` to `max(finished_at)` of the job rows (the database clock "
                "at claim and at ack)"
            )
            self.latency_method = "`started_at − created_at`, both the database clock"
        self.variants: tuple[Variant, ...] = (
            Variant("2", f"2 × `runworker --concurrency {k}`", 2, {"concurrency": k}),
        )
        if not self.redis_url:
            self.variants += (Variant("default", "2 × `runworker` (default concurrency)", 2, {}),)
            orm_k = cfg.get("orm_concurrency", 10)
            self.orm_variants = (
                Variant(
                    f"orm-{orm_k}",
                    f"2 × `runworker --concurrency {orm_k}`",
                    2,
                    {"concurrency": orm_k},
                ),
                Variant("orm-default", "2 × `runworker` (default concurrency)", 2, {}),
            )
        self.orm_method = (
            "`@job` calling `read_write(i)` in a slot thread, which keeps its database "
            "connection from job to job (`worker/slot_db.py`, whatever `CONN_MAX_AGE` says)"
        )

    def reset(self) -> None:
        if self.redis_url:
            self.redis.flushdb()
        tables = ("blamequeue_job", "blamequeue_audit", "blamequeue_flow_dependency")
        with self.connection.cursor() as cur:
            if self.connection.vendor == "postgresql":
                cur.execute(f"TRUNCATE {', '.join(tables)}")
            else:
                for table in tables:
                    cur.execute(f"DELETE FROM {table}")

    def prepare_drain(self) -> None:
        if not self.redis_url:
            with self.connection.cursor() as cur:
                cur.execute("ANALYZE blamequeue_job" if self.storage == "PostgreSQL" else "ANALYZE")

    def enqueue_one(self, i: int) -> str:
        from bench.jobs import NOOP, QUEUE
        from django_blamequeue import queue

        return queue.enqueue(QUEUE, {"i": i}, name=NOOP).job_id

    def enqueue_bulk(self, start: int, stop: int) -> list[str]:
        from bench.jobs import NOOP, QUEUE
        from django_blamequeue import queue

        payloads = [{"i": i} for i in range(start, stop)]
        return [e.job_id for e in queue.enqueue_many(QUEUE, payloads, name=NOOP)]

    def enqueue_stamped(self, phase: int, count: int) -> None:
        from bench.jobs import QUEUE, STAMPED
        from django_blamequeue import queue

        stamp = {"t": time.time(), "p": phase}
        if count == 1:
            queue.enqueue(QUEUE, stamp, name=STAMPED)
        else:
            queue.enqueue_many(QUEUE, [stamp] * count, name=STAMPED)

    def claim_batch(self, since: float, until: float) -> float | None:
        """Jobs per claim statement among the jobs started between two epoch times (one claim
        stamps one ``started_at``); None on Redis."""
        if self.redis_url:
            return None
        from datetime import UTC, datetime

        from django.db.models import Count

        from django_blamequeue.models import Job

        agg = Job.objects.filter(
            started_at__gte=datetime.fromtimestamp(since, UTC),
            started_at__lt=datetime.fromtimestamp(until, UTC),
        ).aggregate(jobs=Count("id"), claims=Count("started_at", distinct=True))
        return agg["jobs"] / agg["claims"] if agg["claims"] else None

    def worker_command(self, variant: Variant, index: int, *, burst: bool) -> list[str]:
        from bench.jobs import QUEUE

        command = [
            sys.executable,
            str(MANAGE),
            "runworker",
            QUEUE,
            "--no-sweep",
            "--progress-interval",
            "3600",
        ]
        if "concurrency" in variant.options:
            command += ["--concurrency", str(variant.options["concurrency"])]
        return [*command, "--burst"] if burst else command

    # -- the ORM workload ------------------------------------------------------------------
    def prepare_orm(self) -> None:
        from bench.ormapp import work

        work.seed()
        work.reset()

    def enqueue_orm_bulk(self, start: int, stop: int) -> list[str]:
        from bench.jobs import QUEUE
        from bench.ormapp.jobs import ORM
        from django_blamequeue import queue

        payloads = [{"i": i} for i in range(start, stop)]
        return [e.job_id for e in queue.enqueue_many(QUEUE, payloads, name=ORM)]

    def orm_entries(self) -> int:
        from bench.ormapp import work

        return work.entries()

    # -- reading back --------------------------------------------------------------------
    def _infos(self, ids: Sequence[str]) -> list[Any]:
        from django_blamequeue import queue

        return [queue.get_job(job_id) for job_id in ids]

    def done_count(self, ids: Sequence[str]) -> int:
        if self.redis_url:
            return sum(1 for info in self._infos(ids) if info is not None and info.state == "done")
        with self.connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM blamequeue_job WHERE state = 'done'")
            return int(cur.fetchone()[0])

    def window(self, ids: Sequence[str]) -> Window:
        if self.redis_url:
            done = [i for i in self._infos(ids) if i is not None and i.state == "done"]
            first = min(i.started_at for i in done)
            last = max(i.finished_at for i in done)
            return Window(len(done), first.timestamp(), last.timestamp())
        from django.db.models import Count, Max, Min

        from django_blamequeue.models import Job

        agg = Job.objects.filter(state="done").aggregate(
            n=Count("id"), first=Min("started_at"), last=Max("finished_at")
        )  # the ORM: SQLite's cursor answers times as text
        return Window(agg["n"], agg["first"].timestamp(), agg["last"].timestamp())

    def latencies(self, ids: Sequence[str], sent: dict[str, float]) -> list[float]:
        if self.redis_url:
            pairs: list[tuple[datetime, datetime]] = [
                (i.created_at, i.started_at) for i in self._infos(ids)
            ]
        else:
            with self.connection.cursor() as cur:
                cur.execute(
                    "SELECT created_at, started_at FROM blamequeue_job WHERE id = ANY(%s)",
                    [list(ids)],
                )
                pairs = cur.fetchall()
        return [(s - c).total_seconds() * 1000 for c, s in pairs]

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        names = ["django-blamequeue", "Django", "psycopg"]
        if self.redis_url:
            names += ["redis"]
        return {n: version(n) for n in names}
