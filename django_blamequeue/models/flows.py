"""Flow dependency rows and the outbox: written in the caller's transaction, read by relays."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import models
from django.db.models import Q


class OutboxQuerySet(models.QuerySet["OutboxEntry"]):
    def add(self, entries: Iterable[tuple[str, str, str, dict[str, Any]]]) -> int:
        """Write ``(kind, backend, job_id, body)`` rows in the current transaction of this
        queryset's database; the caller nudges the relay once that commits."""
        rows = [OutboxEntry(kind=k, backend=b, job_id=j, body=body) for k, b, j, body in entries]
        if rows:
            self.bulk_create(rows)
        return len(rows)


class FlowDependency(models.Model):
    """One edge of a flow: ``job`` waits for ``depends_on`` (DAG), or a parent's child row.

    For DAG flows ``job`` is the dependant and ``depends_on`` the dependency. Parent/child
    flows store one row per child with its spec and its reported outcome.
    """

    KIND_DAG = "dag"
    KIND_CHILD = "child"

    flow_id = models.CharField(max_length=26)
    kind = models.CharField(max_length=10, default=KIND_DAG)
    job_id = models.CharField(max_length=26)
    depends_on_id = models.CharField(max_length=26)
    key = models.CharField(max_length=255, blank=True, default="")
    spec = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=20, default="pending")
    result = models.BinaryField(null=True, blank=True)
    result_type = models.CharField(max_length=100, null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    reported_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "blamequeue_flow_dependency"
        verbose_name_plural = "flow dependencies"
        constraints = [
            models.UniqueConstraint("job_id", "depends_on_id", name="bq_dep_edge"),
        ]
        indexes = [
            models.Index("depends_on_id", name="bq_dep_dependency"),
            # (parent, status) answers "anything pending / failed?"; the child id at the end
            # makes a report's look-up (parent, child, pending) one entry whatever the plan.
            models.Index("job_id", "status", "depends_on_id", name="bq_dep_job_status_child"),
            models.Index("flow_id", name="bq_dep_flow"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} ← {self.depends_on_id}"


class OutboxEntry(models.Model):
    """A message written in the caller's transaction, relayed to an engine after commit."""

    KIND_ENQUEUE = "enqueue"
    KIND_REPORT = "report"

    kind = models.CharField(max_length=20)
    backend = models.CharField(max_length=100)
    job_id = models.CharField(max_length=26)
    body = models.JSONField()
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    objects = OutboxQuerySet.as_manager()

    class Meta:
        db_table = "blamequeue_outbox"
        verbose_name_plural = "outbox entries"
        indexes = [
            models.Index("id", name="bq_outbox_unsent", condition=Q(sent_at__isnull=True)),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.job_id} → {self.backend}"
