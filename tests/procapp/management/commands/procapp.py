"""``manage.py procapp enqueue``: enqueue from a process pointed at another database.

The restart test runs its own PostgreSQL, which the pytest process has no connection to; it
enqueues through this command, run with the workers' environment.
"""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from django_blamequeue import queue

from ...jobs import QUEUE


class Command(BaseCommand):
    help = "Enqueue COUNT procapp.effect jobs in one enqueue_many."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("action", choices=["enqueue"])
        parser.add_argument("--count", type=int, required=True)
        parser.add_argument("--backend", default=None)
        parser.add_argument("--payload", default="{}", help="JSON payload of every job")
        parser.add_argument("--max-attempts", type=int, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        payload = json.loads(options["payload"])
        jobs = queue.enqueue_many(
            QUEUE,
            [payload] * options["count"],
            name="procapp.effect",
            backend=options["backend"],
            max_attempts=options["max_attempts"],
        )
        self.stdout.write(f"enqueued {len(jobs)}")
