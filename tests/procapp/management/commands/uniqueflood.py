"""``manage.py uniqueflood --backend B --queue Q --calls N --keys K --seed S``: N enqueues
of unique jobs over K keys (``key = call % K``, in a shuffled order), as fast as it can.

Started by the process test of unique jobs, several at once; waits for ``--go`` (a file) to
exist so every process starts enqueueing together. Prints one JSON line: how many calls
stored a job, and how many were absorbed.
"""

from __future__ import annotations

import json
import random
import time
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand

from django_blamequeue import Unique, queue


class Command(BaseCommand):
    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--backend", required=True)
        parser.add_argument("--queue", required=True)
        parser.add_argument("--calls", type=int, default=1000)
        parser.add_argument("--keys", type=int, default=50)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--mode", default="skip")
        parser.add_argument("--go", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        calls = [i % options["keys"] for i in range(options["calls"])]
        random.Random(options["seed"]).shuffle(calls)
        spec = Unique(key=lambda p: f"k{p['k']}", on_conflict=options["mode"])
        go = Path(options["go"])
        queue.get_job("0" * 26, backend=options["backend"])  # connect before the start
        while not go.exists():
            time.sleep(0.005)
        stored = absorbed = 0
        for k in calls:
            got = queue.enqueue(
                options["queue"],
                {"k": k, "seed": options["seed"]},
                unique=spec,
                backend=options["backend"],
            )
            if got.deduplicated:
                absorbed += 1
            else:
                stored += 1
        self.stdout.write(json.dumps({"stored": stored, "absorbed": absorbed}))
