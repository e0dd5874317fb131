"""Maintenance services: each a small class with ``run_once(now) -> report``.

``Sweeper`` only owns timing: it runs every service on its period, isolates failures (one
failing service is logged and the others still run) and reports what each did.

A service marked ``paced`` (the ones that read the job table's indexes: rescuer, expirer, depth
gauge, flow repair, claim scout) also waits at least ``PACE`` times as long as its last pass
took before the next: while a long transaction pins PostgreSQL's xmin horizon those indexes
keep an entry for every job finished since, and a pass that reads them all every few seconds
would take a share of the machine from the workers. Paced, a pass that grew to 2 s runs every
40 s (5 % of the time); a normal pass of milliseconds keeps its period. Nothing is skipped,
only spaced: an expired lease waits longer for its rescue, never forever.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.db import connections

from django_blamequeue.backends import all_backends
from django_blamequeue.backends.base import Backend
from django_blamequeue.backends.database import DatabaseBackend
from django_blamequeue.backends.resilience import is_locked, retry_while_locked
from django_blamequeue.conf import get_settings
from django_blamequeue.relay.outbox import Relay
from django_blamequeue.sweeper.claim_scout import ClaimScout
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
#: A paced service's next pass starts no sooner than this many times its last pass's length
#: after that pass ended: at most 1 / (1 + PACE) of the time in that service.
PACE = 19.0


class Service(Protocol):
    name: str
    period: float

    def run_once(self) -> Any: ...


def _paced(service: Service) -> bool:
    """Whether ``service`` waits for a multiple of its last pass (a class attribute
    ``paced = True``; services written elsewhere, without it, keep their period)."""
    return bool(getattr(service, "paced", False))


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
        if isinstance(b, DatabaseBackend) and b.jobtable.is_postgres:
            found.append(ClaimScout(b))
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
    def __init__(
        self,
        services: Sequence[Service] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.services = list(services) if services is not None else services_for(all_backends())
        self.clock = clock  # monotonic seconds; a test gives its own
        self._next: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> SweepReport:
        """Run every service now, whatever its period."""
        report = SweepReport()
        for i, service in enumerate(self.services):
            self._next[i] = self._run_timed(service, report)
        return report

    def _run_timed(self, service: Service, report: SweepReport) -> float:
        """One pass of ``service``; answers when its next pass is due."""
        started = self.clock()
        self._run(service, report)
        due = started + service.period
        if _paced(service):
            ended = self.clock()
            due = max(due, ended + PACE * (ended - started))
        return due

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
        for i, service in enumerate(self.services):
            if self.clock() >= self._next.get(i, 0.0):
                self._next[i] = self._run_timed(service, report)
        return report

    def run_forever(self, on_report: Any = None) -> None:
        while not self._stop.is_set():
            report = self.tick()
            if on_report is not None and (report.results or report.errors):
                on_report(report)
            due = min(self._next.values(), default=self.clock() + 1.0)
            self._stop.wait(max(0.05, min(1.0, due - self.clock())))

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
