"""Retention: deletes done/cancelled (and, if configured, failed) jobs and old audit rows."""

from __future__ import annotations

from datetime import datetime, timedelta

from ..backends import marks
from ..backends.base import Backend
from ..conf import Settings
from ..models import AuditEvent
from ..outbox import database_of
from ..records import PruneReport


class Pruner:
    def __init__(
        self, backend: Backend, *, settings: Settings, period: float = 60.0, batch: int = 5000
    ) -> None:
        self.backend = backend
        self.settings = settings
        self.period = period
        self.batch = batch
        self.name = f"pruner[{backend.alias}]"

    def run_once(self, now: datetime | None = None) -> PruneReport:

        assert self.backend.resilience is not None
        s = self.settings
        t = now or self.backend.now()

        def cut(age: float | None) -> datetime | None:
            return None if age is None else t - timedelta(seconds=age)

        jobs = 0
        while True:
            report = self.backend.resilience.call(
                lambda: self.backend.prune(
                    done_before=cut(s.retention_done),
                    cancelled_before=cut(s.retention_cancelled),
                    failed_before=cut(s.retention_failed),
                    limit=self.batch,
                )
            )
            jobs += report.jobs
            if report.jobs < self.batch:
                break
        if not self.backend.effects_with_ack and s.retention_done is not None:
            before = cut(s.retention_done)
            assert before is not None
            db = self.backend.effects_database
            while marks.prune(db, self.backend.alias, before, self.batch) == self.batch:
                pass
        audit_rows = 0
        # Audit rows live in each backend's database; the first backend (in settings order)
        # of a database prunes them, so backends sharing it don't repeat the work.
        db = database_of(self.backend)
        owner = next(a for a, c in s.backends.items() if database_of(c) == db)
        if s.retention_audit is not None and owner == self.backend.alias:
            before = cut(s.retention_audit)
            rows = AuditEvent.objects.using(db)
            while True:
                ids = list(
                    rows.filter(created_at__lt=before)
                    .order_by("id")
                    .values_list("id", flat=True)[: self.batch]
                )
                if not ids:
                    break
                audit_rows += rows.filter(id__in=ids).delete()[0]
        return PruneReport(jobs=jobs, audit=audit_rows)
