"""Maintenance services: each a small class with ``run_once(now) -> report``.

``Sweeper`` only owns timing: it runs every service on its period, isolates failures (one
failing service is logged and the others still run) and reports what each did.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.db import connections

from django_blamequeue.backends import all_backends
from django_blamequeue.backends.base import Backend
from django_blamequeue.backends.resilience import is_locked, retry_while_locked
from django_blamequeue.conf import get_settings
from django_blamequeue.relay.outbox import Relay
from django_blamequeue.sweeper.depths import Depths
from django_blamequeue.sweeper.expirer import Expirer
from django_blamequeue.sweeper.flow_repair import FlowRepair
from django_blamequeue.sweeper.horizon import HorizonWatch
from django_blamequeue.sweeper.pruner import Pruner
from django_blamequeue.sweeper.rescuer import Rescuer
from django_blamequeue.sweeper.scheduler import Scheduler
from django_blamequeue.sweeper.waker import Waker

logger = logging.getLogger("django_blamequeue.sweeper")

#: Passes tried again when SQLite's write lock is held (50, 100, 200 ms apart).
LOCK_RETRIES = 3


class Service(Protocol):
    name: str
    period: float

    def run_once(self) -> Any: ...


@dataclass(kw_only=True)
class SweepReport:
    results: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def services_for(backends: Sequence[Backend]) -> list[Service]:
    settings = get_settings()
    found: list[Service] = []
    for b in backends:
        found.append(
            Rescuer(b, max_stalled=settings.max_stalled_count, period=settings.sweep_interval)
        )
        found.append(Expirer(b, period=settings.sweep_interval))
        found.append(Pruner(b, settings=settings, period=max(settings.sweep_interval, 60.0)))
        found.append(Depths(b, period=60.0))
        if b.supports_flows:
            found.append(FlowRepair(b, period=settings.flow_sweep_interval))
    found.append(Relay())
    found[-1].period = settings.sweep_interval
    found.append(Scheduler(period=min(settings.sweep_interval, 5.0)))
    for db in sorted({b.effects_database for b in backends}):
        found.append(Waker(db, period=min(settings.sweep_interval, 1.0)))
    # The databases holding job tables (the local backend's, the SQS ledger's).
    for db in sorted({t.db for b in backends if (t := getattr(b, "jobtable", None)) is not None}):
        found.append(HorizonWatch(db))
    return found


class Sweeper:
    def __init__(self, services: Sequence[Service] | None = None) -> None:
        self.services = list(services) if services is not None else services_for(all_backends())
        self._next: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> SweepReport:
        """Run every service now, whatever its period."""
        report = SweepReport()
        for i, service in enumerate(self.services):
            self._run(service, report)
            self._next[i] = time.monotonic() + service.period
        return report

    def _run(self, service: Service, report: SweepReport) -> None:
        """One pass of ``service``. SQLite's write lock, held a moment by a worker's own
        claim or ack, is no failure: the pass (fenced and idempotent, rolled back whole) is
        tried again a few times, quietly; a lock that outlasts them is one line, not a
        traceback, and the next period tries again."""
        try:
            report.results[service.name] = retry_while_locked(
                service.run_once, tries=LOCK_RETRIES + 1, wait=self._stop.wait
            )
        except Exception as exc:
            if is_locked(exc):
                logger.info(
                    "sweeper service %s: the database stayed locked; next pass in %g s",
                    *(service.name, service.period),
                )
            else:
                logger.exception("sweeper service %s failed", service.name)
            report.errors[service.name] = f"{type(exc).__name__}: {exc}"

    def tick(self) -> SweepReport:
        """Run the services that are due."""
        report = SweepReport()
        now = time.monotonic()
        for i, service in enumerate(self.services):
            if now >= self._next.get(i, 0.0):
                self._run(service, report)
                self._next[i] = now + service.period
        return report

    def run_forever(self, on_report: Any = None) -> None:
        while not self._stop.is_set():
            report = self.tick()
            if on_report is not None and (report.results or report.errors):
                on_report(report)
            due = min(self._next.values(), default=time.monotonic() + 1.0)
            self._stop.wait(max(0.05, min(1.0, due - time.monotonic())))

    def start(self, on_report: Any = None) -> None:
        self._thread = threading.Thread(
            target=self._forever, args=(on_report,), name="blamequeue-sweeper", daemon=True
        )
        self._thread.start()

    def _forever(self, on_report: Any) -> None:
        """The thread's life; its database connections close with it, so a process that
        goes on (a test's ``call_command``) is left no session."""
        try:
            self.run_forever(on_report)
        finally:
            connections.close_all()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
