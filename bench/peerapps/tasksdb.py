"""django-tasks' database backend (``django-tasks-db``) under Django's own ``django.tasks``.

Runs in the peers' venv with ``bench.peerapps.tasksdb_settings`` on its own PostgreSQL database.
Its worker, ``manage.py db_worker``, claims one task per transaction and runs one task at a
time per process; ``DBTaskResult`` keeps ``enqueued_at``, ``started_at`` and ``finished_at``
(each the ``timezone.now()`` of the process that wrote it, all on this machine).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from importlib.metadata import version
from typing import Any

from bench.peerapps.harness import Contender, Variant, Window


class TasksDB(Contender):
    key = "django-tasks-db"
    label = "django-tasks-db"
    storage = "PostgreSQL"
    single_api = "`task.enqueue(…)`"
    bulk_api = None  # django.tasks has no bulk enqueue; the drain runs on the single enqueues
    drain_method = (
        "`min(started_at)` to `max(finished_at)` of the `DBTaskResult` rows (the worker "
        "processes' clocks)"
    )
    latency_method = (
        "`started_at − enqueued_at` of the `DBTaskResult` rows (the enqueuing and the "
        "worker process's clock, one machine)"
    )
    variants = (
        Variant("2", "2 × `db_worker` (one task at a time each)", 2),
        Variant("4", "4 × `db_worker`", 4),
    )

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.peerapps.tasksdb_settings"
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection
        from django_tasks_db.models import DBTaskResult

        call_command("migrate", verbosity=0, interactive=False)
        self.connection = connection
        self.model = DBTaskResult

    def reset(self) -> None:
        with self.connection.cursor() as cur:
            cur.execute(f"TRUNCATE {self.model._meta.db_table}")

    def prepare_drain(self) -> None:
        with self.connection.cursor() as cur:
            cur.execute(f"ANALYZE {self.model._meta.db_table}")

    def enqueue_one(self, i: int) -> str:
        from bench.peerapps.tasksdb_tasks import noop

        return str(noop.enqueue(i).id)

    def enqueue_stamped(self, phase: int, count: int) -> None:
        from bench.peerapps.tasksdb_tasks import stamped

        t = time.time()
        for _ in range(count):  # django.tasks has no bulk enqueue
            stamped.enqueue(t, phase)

    def worker_command(self, variant: Variant, index: int, *, burst: bool) -> list[str]:
        command = [
            sys.executable,
            "-m",
            "django",
            "db_worker",
            "--queue-name",
            "bench",
            "--no-startup-delay",  # the window starts at the first claim anyway
            "--verbosity",
            "0",  # no line per task (every contender runs with per-job logging off)
        ]
        return [*command, "--batch"] if burst else command

    def done_count(self, ids: Sequence[str]) -> int:
        return int(self.model.objects.successful().count())

    def window(self, ids: Sequence[str]) -> Window:
        from django.db.models import Count, Max, Min

        agg = self.model.objects.successful().aggregate(
            n=Count("id"), first=Min("started_at"), last=Max("finished_at")
        )
        return Window(agg["n"], agg["first"].timestamp(), agg["last"].timestamp())

    def latencies(self, ids: Sequence[str], sent: dict[str, float]) -> list[float]:
        rows = self.model.objects.filter(id__in=list(ids)).values_list("enqueued_at", "started_at")
        return [(s - e).total_seconds() * 1000 for e, s in rows]

    def versions(self) -> dict[str, str]:
        return {n: version(n) for n in ("django-tasks-db", "Django", "psycopg")}
