"""``manage.py runsweeper``: lease expiry, stalled recovery and retention, on a loop.

Any number of sweepers may run: each step is fenced in the database, so two sweepers never
rescue the same lease twice. Run it beside workers started with ``--no-sweep``, or rely on
the sweeper every ``runworker`` starts.
"""

from __future__ import annotations

import signal
import threading
from argparse import ArgumentParser
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand

from django_blamequeue.backends import all_backends
from django_blamequeue.management.preflight import require_migrated
from django_blamequeue.sweeper import Sweeper, SweepReport, services_for
from django_blamequeue.worker.progress import banner, worker_identity


def describe(report: SweepReport) -> str:
    parts = [f"{name}: {result}" for name, result in report.results.items() if _busy(result)]
    parts += [f"{name} FAILED: {err}" for name, err in report.errors.items()]
    return "; ".join(parts)


def _busy(result: Any) -> bool:
    fields = getattr(result, "__dataclass_fields__", None)
    if not fields:
        return bool(result)
    return any(getattr(result, f) for f in fields)


class Command(BaseCommand):
    help = "Run the sweepers (rescue expired leases, prune old jobs); --once for one pass."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--once", action="store_true", help="run every service once, then exit")

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        sweeper = Sweeper(services_for(all_backends()))
        if options["once"]:
            report = sweeper.run_once()
            for name, result in report.results.items():
                self.stdout.write(f"{name}: {result}")
            for name, err in report.errors.items():
                self.stderr.write(f"{name} FAILED: {err}")
            return
        self.stdout.write(
            banner(
                "django-blamequeue · runsweeper",
                [
                    ("sweeper", worker_identity()),
                    (
                        "services",
                        ", ".join(f"{s.name} every {s.period:g} s" for s in sweeper.services),
                    ),
                ],
            )
        )
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, on_signal)

        def on_report(report: SweepReport) -> None:
            text = describe(report)
            if text:
                self.stdout.write(text)

        sweeper.start(on_report)
        stop.wait()
        sweeper.stop()
        self.stdout.write("sweeper stopped")
