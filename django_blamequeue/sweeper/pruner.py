"""Retention: deletes done/cancelled (and, if configured, failed) jobs and old audit rows."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django_blamequeue.backends import marks
from django_blamequeue.backends.base import Backend
from django_blamequeue.conf import Settings
from django_blamequeue.core.records import PruneReport
from django_blamequeue.jobs import workflow_ops
from django_blamequeue.models import AuditEvent, JobAttempt, TaskAttempt
from django_blamequeue.relay.outbox import database_of


class Pruner:
    def __init__(
        self, backend: Backend, *, settings: Settings, period: float = 60.0, batch: int = 5000
    ) -> None:
        self.backend = backend
        self.settings = settings
        self.period = period
        self.batch = batch
        self.name = f"pruner[{backend.alias}]"
        self._steps_after = ""  # where the next look for a pruned workflow's steps goes on

    def run_once(self, now: datetime | None = None) -> PruneReport:

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
        ages = [a for a in (s.retention_done, s.retention_cancelled, s.retention_failed) if a]
        if ages:  # a workflow's steps go with its job
            before = cut(min(ages))
            assert before is not None
            _, self._steps_after = workflow_ops.forget_pruned(
                self.backend, before, self._steps_after, min(self.batch, 500)
            )
        audit_rows = 0
        # Audit rows live in each backend's database; the first backend (in settings order)
        # of a database prunes them, so backends sharing it don't repeat the work.
        db = database_of(self.backend)
        owner = next(a for a, c in s.backends.items() if database_of(c) == db)
        if s.retention_audit is not None and owner == self.backend.alias:
            before = cut(s.retention_audit)
            audit_rows = self._delete_before(AuditEvent.objects.using(db), "created_at", before)
            # Attempt histories (jobs', task runs') are kept as long as the audit trail.
            self._delete_before(JobAttempt.objects.using(db), "finished_at", before)
            self._delete_before(TaskAttempt.objects.using(db), "started_at", before)
        return PruneReport(jobs=jobs, audit=audit_rows)

    def _delete_before(self, rows: Any, column: str, before: datetime | None) -> int:
        """Delete the rows older than ``before``, ``batch`` at a time; answers how many."""
        deleted = 0
        while True:
            ids = list(
                rows.filter(**{f"{column}__lt": before})
                .order_by("id")
                .values_list("id", flat=True)[: self.batch]
            )
            if not ids:
                return deleted
            deleted += rows.filter(id__in=ids).delete()[0]
