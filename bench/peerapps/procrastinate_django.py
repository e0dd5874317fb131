"""Procrastinate through its Django integration (``procrastinate.contrib.django``): ORM jobs.

Runs in the peers' venv with ``bench.peerapps.procrastinate_django_settings`` on its own
PostgreSQL database (``BENCH_ORM_DATABASE_URL``), which holds Procrastinate's tables (its Django
migrations) and the ORM workload's. Jobs are deferred through Django's connection
(``DjangoConnector``); the workers are ``manage.py procrastinate worker`` (here ``python -m
django procrastinate worker``), which run a sync task in a thread with the integration's
``close_old_connections()`` around it. Timestamps as for plain Procrastinate:
``procrastinate_events``, the database clock.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.metadata import version
from typing import Any

from bench.peerapps.harness import Contender, Variant, Window

SETTINGS = "bench.peerapps.procrastinate_django_settings"
QUEUE = "bench"


class ProcrastinateDjango(Contender):
    key = "procrastinate-django"
    label = "Procrastinate (Django integration)"
    storage = "PostgreSQL"
    single_api = "`task.defer(…)`"
    bulk_api = "`task.batch_defer(…)`"
    drain_method = (
        "first `started` to last `succeeded` event in `procrastinate_events` (the database clock)"
    )
    latency_method = "—"
    orm_method = (
        "a sync `@app.task` calling `read_write(i)`; the integration's task middleware runs "
        "`close_old_connections()` before and after each task"
    )
    variants = ()  # the no-op workload is plain Procrastinate's (``procrastinate_app``)

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        call_command("migrate", verbosity=0, interactive=False)
        self.connection = connection
        k = cfg.get("orm_concurrency", 10)
        self.orm_variants = (
            Variant(
                f"orm-{k}",
                f"2 × `manage.py procrastinate worker --concurrency {k}`",
                2,
                {"concurrency": k, "env": {"DJANGO_SETTINGS_MODULE": SETTINGS}},
            ),
        )

    def _sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.connection.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else []

    def reset(self) -> None:
        self._sql("TRUNCATE procrastinate_jobs, procrastinate_events CASCADE")

    def prepare_drain(self) -> None:
        self._sql("ANALYZE procrastinate_jobs")

    def enqueue_one(self, i: int) -> str:
        raise NotImplementedError  # no no-op workload here

    def prepare_orm(self) -> None:
        from bench.ormapp import work

        work.seed()
        work.reset()

    def enqueue_orm_bulk(self, start: int, stop: int) -> list[str]:
        from bench.peerapps.procrastinate_django_tasks import orm

        return [str(j) for j in orm.batch_defer(*({"i": i} for i in range(start, stop)))]

    def orm_entries(self) -> int:
        from bench.ormapp import work

        return work.entries()

    def worker_command(self, variant: Variant, index: int, *, burst: bool) -> list[str]:
        command = [
            sys.executable,
            "-m",
            "django",
            "procrastinate",
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
        return int(
            self._sql("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")[0][0]
        )

    def window(self, ids: Sequence[str]) -> Window:
        ((n, first, last),) = self._sql(
            "SELECT count(*) FILTER (WHERE type = 'succeeded'), "
            "min(at) FILTER (WHERE type = 'started'), max(at) FILTER (WHERE type = 'succeeded') "
            "FROM procrastinate_events"
        )
        return Window(int(n), first.timestamp(), last.timestamp())

    def latencies(self, ids: Sequence[str], sent: dict[str, float]) -> list[float]:
        raise NotImplementedError  # no latency run: the ORM workload only drains

    def versions(self) -> dict[str, str]:
        return {n: version(n) for n in ("procrastinate", "Django", "psycopg", "psycopg-pool")}
