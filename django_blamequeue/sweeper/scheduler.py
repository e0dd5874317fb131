"""Fires schedules: a compare-and-set on ``last_fired_at`` in the enqueue's transaction.

Any number of sweepers may run this: only the one whose update moves ``last_fired_at`` forward
enqueues, and its enqueue commits with that update when the job's backend is local on the
schedules' database (``database``, the default one unless told), so each occurrence fires once.
Elsewhere the job carries the dedupe key ``schedule:NAME:TIME``, which an active job holds.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q

from django_blamequeue import audit
from django_blamequeue.backends import get_backend
from django_blamequeue.conf import get_settings
from django_blamequeue.core.options import UNSET
from django_blamequeue.core.schedules import latest_due
from django_blamequeue.jobs import enqueueing, registry
from django_blamequeue.models import Schedule

logger = logging.getLogger("django_blamequeue.scheduler")
FIRE = audit.SCHEDULE_FIRE


class Scheduler:
    def __init__(self, *, period: float = 5.0, database: str = "default") -> None:
        self.period = period
        self.database = database
        self.name = "scheduler"
        self._synced: Mapping[str, Any] | None = None

    def sync_settings(self, now: datetime) -> None:
        """Mirror ``SCHEDULES`` into the table (anchored at now: the first fire is the next)."""

        wanted = get_settings().schedules
        if wanted is self._synced:  # settings only change through a reset: once per change
            return
        schedules = Schedule.objects.using(self.database)
        schedules.filter(source="settings").exclude(name__in=list(wanted)).delete()
        for name, entry in wanted.items():
            fields = {
                "job": entry["job"],
                "queue": entry.get("queue", ""),
                "payload": entry.get("payload"),
                "cron": entry.get("cron", ""),
                "interval": entry.get("interval"),
                "timezone": entry.get("timezone", "UTC"),
                "enabled": entry.get("enabled", True),
                "backend": entry.get("backend", ""),
                "source": "settings",
            }
            updated = schedules.filter(name=name).update(**fields)
            if not updated:
                schedules.get_or_create(name=name, defaults={**fields, "last_fired_at": now})
        self._synced = wanted

    def run_once(self, now: datetime | None = None) -> dict[str, int]:

        t = now or get_backend(None).now()
        self.sync_settings(t)
        schedules = Schedule.objects.using(self.database)
        schedules.filter(last_fired_at__isnull=True).update(last_fired_at=t)
        fired = skipped = 0
        for s in schedules.filter(enabled=True):
            try:
                fired += self._fire(s, t)
            except Exception as exc:
                skipped += 1
                logger.warning("schedule %s skipped: %s", s.name, exc)
        return {"fired": fired, "skipped": skipped} if fired or skipped else {}

    def _fire(self, s: Any, now: datetime) -> int:

        assert s.last_fired_at is not None
        due = latest_due(
            cron=s.cron, interval=s.interval, tz=s.timezone, last=s.last_fired_at, now=now
        )
        if due is None:
            return 0
        definition = registry.get(s.job)
        if definition is None:
            raise LookupError(f"job {s.job!r} is not registered")
        with transaction.atomic(using=self.database):
            moved = (
                Schedule.objects.using(self.database)
                .filter(Q(last_fired_at__lt=due) | Q(last_fired_at__isnull=True), id=s.id)
                .update(last_fired_at=due)
            )
            if not moved:
                return 0  # another sweeper fired this occurrence
            given = {
                "queue": s.queue or UNSET,  # blank: the job's own
                "backend": s.backend or UNSET,
                "priority": 0,  # a schedule's runs are at priority 0, whatever their @job says
                "dedupe_key": f"schedule:{s.name}:{due.isoformat()}",
            }
            job = enqueueing.enqueue(
                s.payload, given, definition=definition, name=s.job, cause={"schedule": s.name}
            )
            fire = audit.Event(
                action=FIRE,
                job_id=job.job_id,
                queue=job.queue_name,
                backend=job.backend,
                data={"schedule": s.name, "fire_time": due.isoformat()},
            )
            audit.record([fire], using=self.database)
        return 1
