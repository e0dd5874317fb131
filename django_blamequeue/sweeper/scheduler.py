"""Fires schedules: a compare-and-set on ``last_fired_at`` in the enqueue's transaction.

Any number of sweepers may run this: only the one whose update moves ``last_fired_at`` forward
enqueues, and its enqueue commits with that update when the job's backend is local on the
schedules' database (``database``, the default one unless told), so each occurrence fires once.
Elsewhere the job carries the dedupe key ``schedule:NAME:TIME``, which an active job holds.

Under ``overlap="skip"`` (the default) an occurrence that comes due while the schedule's last
job still waits or runs is skipped instead: the same compare-and-set consumes it, and the skip
is counted on the row (``skipped``), audited (``system.queue.schedule.skip``) and logged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F, Q

from django_blamequeue import audit
from django_blamequeue.backends import get_backend
from django_blamequeue.conf import get_settings
from django_blamequeue.core.options import UNSET
from django_blamequeue.core.schedules import latest_due
from django_blamequeue.core.states import ACTIVE
from django_blamequeue.jobs import enqueueing, registry, schedules
from django_blamequeue.models import Schedule

logger = logging.getLogger("django_blamequeue.scheduler")
FIRE = audit.SCHEDULE_FIRE
SKIP = audit.SCHEDULE_SKIP
_ACTIVE = frozenset(s.value for s in ACTIVE)


class Scheduler:
    def __init__(self, *, period: float = 5.0, database: str = "default") -> None:
        self.period = period
        self.database = database
        self.name = "scheduler"
        self._synced: tuple[Mapping[str, Any], int] | None = None

    def sync_settings(self, now: datetime) -> None:
        """Mirror ``SCHEDULES`` and the schedules declared in code into the table (anchored at
        now: the first fire is the next). A ``SCHEDULES`` entry replaces a declared one of its
        name."""
        settings_entries = get_settings().schedules
        version, code = schedules.declared()
        synced = self._synced
        # settings only change through a reset, declarations with the version: once per change
        if synced is not None and synced[0] is settings_entries and synced[1] == version:
            return
        wanted = {name: (entry, "code") for name, entry in code.items()}
        wanted |= {name: (entry, "settings") for name, entry in settings_entries.items()}
        rows = Schedule.objects.using(self.database)
        rows.filter(source__in=["settings", "code"]).exclude(name__in=list(wanted)).delete()
        for name, (entry, source) in wanted.items():
            fields = {
                "job": entry["job"],
                "queue": entry.get("queue", ""),
                "payload": schedules.payload_of(entry),
                "cron": entry.get("cron", ""),
                "interval": entry.get("interval"),
                "timezone": entry.get("timezone", "UTC"),
                "enabled": entry.get("enabled", True),
                "backend": entry.get("backend", ""),
                "overlap": entry.get("overlap", "skip"),
                "expires": entry.get("expires"),
                "source": source,
            }
            updated = rows.filter(name=name).update(**fields)
            if not updated:
                rows.get_or_create(name=name, defaults={**fields, "last_fired_at": now})
        self._synced = (settings_entries, version)

    def run_once(self, now: datetime | None = None) -> dict[str, int]:
        """Fire what is due at ``now``; answers ``{"fired", "skipped", "failed"}`` (empty
        when nothing happened): skipped under ``overlap="skip"``, failed when a schedule
        cannot fire (logged; tried again at the next pass)."""
        t = now or get_backend(None).now()
        self.sync_settings(t)
        rows = Schedule.objects.using(self.database)
        rows.filter(last_fired_at__isnull=True).update(last_fired_at=t)
        counts = {"fired": 0, "skipped": 0, "failed": 0}
        for s in rows.filter(enabled=True):
            try:
                happened = self._fire(s, t)
            except Exception as exc:
                counts["failed"] += 1
                logger.warning("schedule %s skipped: %s", s.name, exc)
            else:
                if happened:
                    counts[happened] += 1
        return counts if any(counts.values()) else {}

    def _fire(self, s: Any, now: datetime) -> str | None:
        """Fire (or skip) ``s``'s due occurrence: ``"fired"``, ``"skipped"``, or None when
        nothing is due or another sweeper took it."""
        assert s.last_fired_at is not None
        due = latest_due(
            cron=s.cron, interval=s.interval, tz=s.timezone, last=s.last_fired_at, now=now
        )
        if due is None:
            return None
        definition = registry.get(s.job)
        if definition is None:
            raise LookupError(f"job {s.job!r} is not registered")
        why = schedules.call_problem({"payload": s.payload}, definition)
        if why is not None:
            raise TypeError(f"it {why}")
        running = self._running(s) if s.overlap == "skip" else None
        with transaction.atomic(using=self.database):
            moved = (
                Schedule.objects.using(self.database)
                .filter(Q(last_fired_at__lt=due) | Q(last_fired_at__isnull=True), id=s.id)
                .update(last_fired_at=due)
            )
            if not moved:
                return None  # another sweeper fired this occurrence
            if running is not None:
                self._skip(s, due, running)
                return "skipped"
            given = {
                "queue": s.queue or UNSET,  # blank: the job's route, else its own
                "backend": s.backend or UNSET,
                "priority": 0,  # a schedule's runs are at priority 0, whatever their @job says
                "dedupe_key": f"schedule:{s.name}:{due.isoformat()}",
            }
            if s.expires is not None:
                given["expires"] = s.expires
            job = enqueueing.enqueue(
                s.payload, given, definition=definition, name=s.job, cause={"schedule": s.name}
            )
            Schedule.objects.using(self.database).filter(id=s.id).update(
                last_job_id=job.job_id, last_job_backend=job.backend
            )
            fire = audit.Event(
                action=FIRE,
                job_id=job.job_id,
                queue=job.queue_name,
                backend=job.backend,
                data={"schedule": s.name, "fire_time": due.isoformat()},
            )
            audit.record([fire], using=self.database)
        return "fired"

    def _running(self, s: Any) -> tuple[str, str, str, str] | None:
        """The schedule's last job as (backend, id, state, queue) while it waits or runs, else
        None.
        A backend no longer configured, or a job pruned, is not running."""
        if not s.last_job_id:
            return None
        try:
            backend = get_backend(s.last_job_backend or None)
        except Exception:
            return None
        info = backend.resilience.call(lambda: backend.get(s.last_job_id), idempotent=True)
        if info is None or info.state not in _ACTIVE:
            return None
        return backend.alias, info.job_id, info.state, info.queue

    def _skip(self, s: Any, due: datetime, running: tuple[str, str, str, str]) -> None:
        alias, job_id, state, queue = running
        Schedule.objects.using(self.database).filter(id=s.id).update(
            skipped=F("skipped") + 1, last_skipped_at=due
        )
        event = audit.Event(
            action=SKIP,
            job_id=job_id,
            queue=queue,
            backend=alias,
            data={"schedule": s.name, "fire_time": due.isoformat(), "running": state},
        )
        audit.record([event], using=self.database)
        logger.info(
            "schedule %s skipped its %s run: its last job %s is still %s (overlap='skip')",
            s.name,
            due.isoformat(),
            job_id,
            state,
        )
