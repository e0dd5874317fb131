"""The job tables: ``Job`` (the local backend) and ``SqsJob`` (the SQS backend's ledger), one
set of columns (``JobFields``) and the indexes each backend's statements rely on.

State changes go through the lifecycle (``backends.database``), never through ``save()``: the
admin shows jobs read-only. Indexes whose key or predicate holds ``state`` take an entry at
every state change (no update of a job row is HOT), so ``Job``'s are partial where a claim or
an ack need not touch them (migration 0010; docs/perf-notes.md).
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q

from django_blamequeue.core.states import State

STATE_CHOICES = [(s.value, s.value.replace("_", " ")) for s in State]
ACTIVE_STATES = [s.value for s in State if s not in (State.DONE, State.FAILED, State.CANCELLED)]


class JobQuerySet(models.QuerySet["Job"]):
    def pending(self) -> JobQuerySet:
        return self.filter(state=State.PENDING)

    def inflight(self) -> JobQuerySet:
        return self.filter(state=State.INFLIGHT)

    def failed(self) -> JobQuerySet:
        return self.filter(state=State.FAILED)

    def waiting(self) -> JobQuerySet:
        return self.filter(state__in=[State.PENDING, State.BLOCKED])

    def active(self) -> JobQuerySet:
        return self.filter(state__in=ACTIVE_STATES)

    def traced(self, trace_id: str) -> JobQuerySet:
        return self.filter(traced(trace_id))


def traced(trace_id: str) -> Q:
    """The jobs of a trace, on indexes: ``bq_job_trace`` holds every row but the inflight
    ones, which a partial index on inflight rows finds (an ``OR`` of the two: a
    ``BitmapOr`` on PostgreSQL)."""
    inflight = Q(state="inflight")
    return (Q(trace_id=trace_id) & ~inflight) | (Q(trace_id=trace_id) & inflight)


class JobFields(models.Model):
    """The columns of a job, shared by ``Job`` (the local backend) and ``SqsJob`` (the SQS
    backend's ledger), so one body of code reads and writes both tables."""

    id = models.CharField(primary_key=True, max_length=26, editable=False)
    queue = models.CharField(max_length=200)
    name = models.CharField(max_length=255)
    state = models.CharField(max_length=20, choices=STATE_CHOICES, default=State.PENDING)
    payload = models.BinaryField()
    content_type = models.CharField(max_length=100, default="application/json")
    content_encoding = models.CharField(max_length=30, default="utf-8")
    priority = models.IntegerField(default=0)
    available_at = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=3)
    stalls = models.PositiveIntegerField(default=0)
    timeout = models.FloatField(null=True, blank=True)
    lease_token = models.CharField(max_length=32, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # The lease under which the job runs alone in its worker (a job on probation: it stalled
    # before); a stall of that very lease is the job's own fault (core.lifecycle.rescue).
    alone_token = models.CharField(max_length=32, null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    progress = models.PositiveSmallIntegerField(default=0)
    # The JSON text the last attempt saved with ctx.checkpoint(); the next attempt reads it.
    checkpoint = models.TextField(null=True, blank=True)
    result = models.BinaryField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    traceback = models.TextField(null=True, blank=True)
    # The class path of the exception behind ``error`` (``builtins.ValueError``), if any.
    error_type = models.CharField(max_length=255, null=True, blank=True)
    reason = models.CharField(max_length=30, null=True, blank=True)
    classification = models.CharField(max_length=100, null=True, blank=True)
    trace_id = models.CharField(max_length=64, null=True, blank=True)
    dedupe_key = models.CharField(max_length=255, null=True, blank=True)
    flow_id = models.CharField(max_length=26, null=True, blank=True)
    parent_id = models.CharField(max_length=26, null=True, blank=True)
    flow_key = models.CharField(
        max_length=255, null=True, blank=True
    )  # the node's name in its flow
    flow_phase = models.CharField(
        max_length=20, null=True, blank=True
    )  # flow parents: fan_out|collect
    flow_mode = models.CharField(
        max_length=10, null=True, blank=True
    )  # on_child_failure: fail|continue
    parent_backend = models.CharField(max_length=100, null=True, blank=True)  # where reports go
    flow_depth = models.PositiveSmallIntegerField(default=0)
    # The key of the queue's per-key limits (key_concurrency, key_rate_limit); docs/control.md.
    concurrency_key = models.CharField(max_length=255, null=True, blank=True)
    snoozes = models.PositiveIntegerField(default=0)  # times the handler raised Snooze
    # "app_label.model_name:pk" of the model object the job is about (``enqueue(about=obj)``)
    about = models.CharField(max_length=255, null=True, blank=True)
    # where the job came from: site, request, user, parent_job, schedule, flow (``jobs/origin.py``)
    origin = models.JSONField(null=True, blank=True)
    # Unique jobs (docs/unique.md): the key; the states in which the job holds it
    # (",pending,blocked,"), NULL once another job took the key over; the end of its window;
    # the enqueues of the key it absorbed.
    unique_key = models.CharField(max_length=255, null=True, blank=True)
    unique_states = models.CharField(max_length=100, null=True, blank=True)
    unique_until = models.DateTimeField(null=True, blank=True)
    unique_calls = models.PositiveIntegerField(default=0)
    # Not started by then → cancelled with reason "expired" (``enqueue(expires=...)``): a
    # claim never leases it, the sweeper cancels it (docs/lifecycle.md#expiry).
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.name} [{self.id}] {self.state}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self._state.adding or kwargs.pop("lifecycle", False):
            super().save(*args, **kwargs)
            return
        raise TypeError("jobs change state through django_blamequeue.queue, not Job.save()")


class Job(JobFields):
    objects = JobQuerySet.as_manager()

    class Meta:
        db_table = "blamequeue_job"
        permissions = [
            ("retry_job", "Can retry jobs from the dead-letter queue"),
            ("purge_queue", "Can purge a queue's waiting jobs"),
            ("cancel_job", "Can cancel jobs"),
            ("move_job", "Can move jobs to another queue"),
            ("reprioritize_job", "Can change jobs' priority"),
            ("view_encrypted_job", "Can see encrypted jobs' payloads, results and errors"),
        ]
        ordering = ["-priority", "available_at", "id"]
        indexes = [
            # The claim: WHERE state='pending' AND queue=? AND available_at<=now
            # ORDER BY priority DESC, available_at, id. Partial, so done rows cost nothing.
            models.Index(
                "queue",
                models.F("priority").desc(),
                "available_at",
                "id",
                name="bq_job_claim",
                condition=Q(state="pending"),
            ),
            # Inflight rows, one entry each (a claim takes two entries: this and the primary
            # key): the rescuer's expired leases (the few inflight rows scanned whole), a
            # limited claim's count of a queue's jobs in flight per key (counted under the
            # queue's control-row lock), a trace's inflight rows (``Job.objects.traced``).
            models.Index(
                "queue",
                "concurrency_key",
                "lease_expires_at",
                name="bq_job_inflight",
                condition=Q(state="inflight"),
            ),
            # Listings and counts per queue/state (admin, DLQ, purge, size). Neither a claim
            # (to inflight) nor a done ack takes an entry: inflight rows per queue are
            # ``bq_job_inflight``'s, done rows per state are ``bq_job_finished``'s.
            models.Index(
                "queue",
                "state",
                "id",
                name="bq_job_queue_state",
                condition=~Q(state__in=["inflight", "done"]),
            ),
            # Retention and "finished in the last hour": terminal rows by age. A claim (whose
            # row has no finished_at) takes no entry.
            models.Index(
                "state",
                "finished_at",
                name="bq_job_finished",
                condition=Q(finished_at__isnull=False),
            ),
            models.Index("flow_id", name="bq_job_flow", condition=Q(flow_id__isnull=False)),
            models.Index("parent_id", name="bq_job_parent", condition=Q(parent_id__isnull=False)),
            # Look-ups by trace id. A claim takes no entry: the few inflight rows are found
            # through ``bq_job_inflight`` (``Job.objects.traced``).
            models.Index(
                "trace_id",
                name="bq_job_trace",
                condition=Q(trace_id__isnull=False) & ~Q(state="inflight"),
            ),
            # Limited claims: the pending jobs of one key in claim order.
            models.Index(
                "queue",
                "concurrency_key",
                models.F("priority").desc(),
                "available_at",
                "id",
                name="bq_job_key_claim",
                condition=Q(state="pending") & Q(concurrency_key__isnull=False),
            ),
            # ``queue.jobs_about(obj)``: an object's jobs, newest first (ids sort by time).
            models.Index("about", "id", name="bq_job_about", condition=Q(about__isnull=False)),
            # The expiry sweep: waiting jobs that expire, by expiry. Jobs without one (most)
            # take no entry.
            models.Index(
                "expires_at",
                name="bq_job_expires",
                condition=Q(state__in=["pending", "blocked"]) & Q(expires_at__isnull=False),
            ),
        ]
        constraints = [
            # At most one non-terminal job per (queue, dedupe_key).
            models.UniqueConstraint(
                "queue",
                "dedupe_key",
                name="bq_job_dedupe",
                condition=Q(dedupe_key__isnull=False) & Q(state__in=ACTIVE_STATES),
            ),
            # One holder per unique key: the enqueue's upsert names this index (uniques.py).
            models.UniqueConstraint(
                "unique_key", name="bq_job_unique", condition=Q(unique_states__isnull=False)
            ),
            models.CheckConstraint(
                condition=Q(progress__gte=0) & Q(progress__lte=100), name="bq_job_progress"
            ),
        ]


class SqsJob(JobFields):
    """The SQS backend's job record (its ledger; docs/backends/sqs.md says why it exists).

    SQS carries the message and times the lease; this row answers what SQS cannot: look-up by
    id, the DLQ listing, the lease token that fences acks, attempts, flows. ``receipt_handle``
    and ``message_id`` are those of the message the current holder received; ``sent_at`` is
    NULL while the job has no live message (not sent yet, parked past SQS's 15-minute delay,
    or its message deleted), which is what the sweeper's send step looks for; it also re-sends
    a pending job whose message is old enough for the queue's retention period to drop it.
    """

    receipt_handle = models.TextField(null=True, blank=True)
    message_id = models.CharField(max_length=100, null=True, blank=True)
    receive_count = models.PositiveIntegerField(default=0)  # SQS's, at the holder's receive
    sent_at = models.DateTimeField(null=True, blank=True)

    objects: models.Manager[SqsJob] = models.Manager()

    class Meta:
        db_table = "blamequeue_sqs_job"
        default_permissions = ()  # shown through the backend API, never as a model
        ordering = ["-priority", "available_at", "id"]
        indexes = [
            # The rescuer: inflight rows by lease expiry.
            models.Index("lease_expires_at", name="bq_sqs_lease", condition=Q(state="inflight")),
            # The send step: pending rows with no message (sent_at NULL) by due time, and
            # those whose message is old enough for SQS's retention to drop it.
            models.Index(
                "sent_at", "available_at", name="bq_sqs_send", condition=Q(state="pending")
            ),
            models.Index("queue", "state", "id", name="bq_sqs_queue_state"),
            models.Index("state", "finished_at", name="bq_sqs_finished"),
            models.Index("flow_id", name="bq_sqs_flow", condition=Q(flow_id__isnull=False)),
            models.Index("parent_id", name="bq_sqs_parent", condition=Q(parent_id__isnull=False)),
            models.Index("trace_id", name="bq_sqs_trace", condition=Q(trace_id__isnull=False)),
            models.Index(
                "queue",
                "concurrency_key",
                name="bq_sqs_inflight_key",
                condition=Q(state="inflight"),
            ),
            models.Index("about", "id", name="bq_sqs_about", condition=Q(about__isnull=False)),
            models.Index(
                "expires_at",
                name="bq_sqs_expires",
                condition=Q(state__in=["pending", "blocked"]) & Q(expires_at__isnull=False),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                "queue",
                "dedupe_key",
                name="bq_sqs_dedupe",
                condition=Q(dedupe_key__isnull=False) & Q(state__in=ACTIVE_STATES),
            ),
            models.UniqueConstraint(
                "unique_key", name="bq_sqs_unique", condition=Q(unique_states__isnull=False)
            ),
            models.CheckConstraint(
                condition=Q(progress__gte=0) & Q(progress__lte=100), name="bq_sqs_progress"
            ),
        ]
