"""Tables of the local backend, plus the outbox and the audit log every backend uses.

State changes go through the lifecycle (``backends.database``), never through ``save()`` on
these models: the admin shows them read-only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import models
from django.db.models import Q

from .core.states import State

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


class OutboxQuerySet(models.QuerySet["OutboxEntry"]):
    def add(self, entries: Iterable[tuple[str, str, str, dict[str, Any]]]) -> int:
        """Write ``(kind, backend, job_id, body)`` rows in the current transaction of this
        queryset's database; the caller nudges the relay once that commits."""
        rows = [OutboxEntry(kind=k, backend=b, job_id=j, body=body) for k, b, j, body in entries]
        if rows:
            self.bulk_create(rows)
        return len(rows)


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
    # where the job came from: site, request, user, parent_job, schedule, flow (``origin.py``)
    origin = models.JSONField(null=True, blank=True)
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
            # The rescuer: inflight rows by lease expiry.
            models.Index("lease_expires_at", name="bq_job_lease", condition=Q(state="inflight")),
            # Listings and counts per queue/state (admin, stats, DLQ, purge).
            models.Index("queue", "state", "id", name="bq_job_queue_state"),
            # Retention: terminal rows by age.
            models.Index("state", "finished_at", name="bq_job_finished"),
            models.Index("flow_id", name="bq_job_flow", condition=Q(flow_id__isnull=False)),
            models.Index("parent_id", name="bq_job_parent", condition=Q(parent_id__isnull=False)),
            models.Index("trace_id", name="bq_job_trace", condition=Q(trace_id__isnull=False)),
            # Limited claims: jobs in flight per queue and key (counted under the queue's
            # control-row lock), and the pending jobs of one key in claim order.
            models.Index(
                "queue",
                "concurrency_key",
                name="bq_job_inflight_key",
                condition=Q(state="inflight"),
            ),
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
        ]
        constraints = [
            # At most one non-terminal job per (queue, dedupe_key).
            models.UniqueConstraint(
                "queue",
                "dedupe_key",
                name="bq_job_dedupe",
                condition=Q(dedupe_key__isnull=False) & Q(state__in=ACTIVE_STATES),
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
        ]
        constraints = [
            models.UniqueConstraint(
                "queue",
                "dedupe_key",
                name="bq_sqs_dedupe",
                condition=Q(dedupe_key__isnull=False) & Q(state__in=ACTIVE_STATES),
            ),
            models.CheckConstraint(
                condition=Q(progress__gte=0) & Q(progress__lte=100), name="bq_sqs_progress"
            ),
        ]


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


class AuditEvent(models.Model):
    """One audited event (SPEC §8); read-only once written."""

    action = models.CharField(max_length=100)
    job_id = models.CharField(max_length=26, null=True, blank=True)
    queue = models.CharField(max_length=200, null=True, blank=True)
    backend = models.CharField(max_length=100, null=True, blank=True)
    attempt = models.PositiveIntegerField(null=True, blank=True)
    user = models.CharField(max_length=150, null=True, blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        db_table = "blamequeue_audit"
        ordering = ["-id"]
        indexes = [
            models.Index("job_id", name="bq_audit_job"),
            models.Index("action", "id", name="bq_audit_action"),
            models.Index("queue", "id", name="bq_audit_queue"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.job_id or ''}"


class TaskAttempt(models.Model):
    """One attempt of a ``django.tasks`` task run: the worker that ran it and how it ended.

    Written by the task's own runner (``tasks/running.py``) when the attempt starts and when
    it ends, in the database of the job's backend (``default`` for redis and sqs), so
    ``get_result`` can answer ``worker_ids`` and one ``TaskError`` per failed attempt. An
    attempt whose worker was killed has a start and no end. Pruned with the audit rows.
    """

    job_id = models.CharField(max_length=26)
    attempt = models.PositiveIntegerField()
    worker_id = models.CharField(max_length=255)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    exception_class_path = models.CharField(max_length=255, null=True, blank=True)
    traceback = models.TextField(null=True, blank=True)

    class Meta:
        db_table = "blamequeue_task_attempt"
        constraints = [
            models.UniqueConstraint("job_id", "attempt", name="bq_task_attempt_unique"),
        ]
        indexes = [models.Index("started_at", name="bq_task_attempt_started")]

    def __str__(self) -> str:
        return f"{self.job_id} #{self.attempt} on {self.worker_id}"


class Schedule(models.Model):
    """A recurring job (SPEC §5): a cron expression or a fixed interval, in a timezone.

    Rows from ``SCHEDULES`` are synced with ``source="settings"``; rows made in the admin have
    ``source="admin"``. ``last_fired_at`` is compare-and-set in the enqueue's transaction, so
    any number of sweepers fire each occurrence once.
    """

    name = models.CharField(max_length=200, unique=True)
    job = models.CharField(max_length=255, help_text="registered job name")
    queue = models.CharField(max_length=200, blank=True, default="", help_text="default: the job's")
    payload = models.JSONField(null=True, blank=True)
    cron = models.CharField(max_length=100, blank=True, default="")
    interval = models.FloatField(null=True, blank=True, help_text="seconds (instead of cron)")
    timezone = models.CharField(max_length=64, default="UTC")
    enabled = models.BooleanField(default=True)
    source = models.CharField(max_length=20, default="admin")
    backend = models.CharField(max_length=100, blank=True, default="")
    last_fired_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "blamequeue_schedule"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class QueueControl(models.Model):
    """A queue's control state on one backend whose jobs are rows (local, the SQS ledger):
    paused or not, and its live limits. A claim of a limited queue locks this row, so every
    worker's claims of it are serialised and count the jobs in flight afresh (docs/control.md).

    ``has_limits``: ``set_limits`` stored limits (the settings' defaults no longer apply);
    ``limited``: one of them is set, or the queue is paused — what the unlimited claim checks,
    so a worker whose cached state is stale never claims past a new pause or limit.
    """

    backend = models.CharField(max_length=100)
    queue = models.CharField(max_length=200)
    paused = models.BooleanField(default=False)
    reason = models.TextField(blank=True, default="")
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=150, null=True, blank=True)
    has_limits = models.BooleanField(default=False)
    limited = models.BooleanField(default=False)
    concurrency = models.PositiveIntegerField(null=True, blank=True)
    key_concurrency = models.PositiveIntegerField(null=True, blank=True)
    rate_max = models.PositiveIntegerField(null=True, blank=True)
    rate_per = models.FloatField(null=True, blank=True)
    key_rate_max = models.PositiveIntegerField(null=True, blank=True)
    key_rate_per = models.FloatField(null=True, blank=True)
    key_cursor = models.CharField(max_length=255, null=True, blank=True)  # round robin of keys
    version = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "blamequeue_queue_control"
        default_permissions = ()
        permissions = [
            ("pause_queue", "Can pause and resume queues"),
            ("change_queue_limits", "Can change queue limits"),
        ]
        constraints = [models.UniqueConstraint("backend", "queue", name="bq_control_queue")]

    def __str__(self) -> str:
        return f"{self.backend}:{self.queue}"


class RateStart(models.Model):
    """One handler start of a rate-limited queue (``key`` "" for the queue's own window):
    the rolling window a claim counts. Rows older than the window are deleted by the next
    claim of the queue."""

    backend = models.CharField(max_length=100)
    queue = models.CharField(max_length=200)
    key = models.CharField(max_length=255, default="")
    started_at = models.DateTimeField()

    class Meta:
        db_table = "blamequeue_rate_start"
        default_permissions = ()
        indexes = [models.Index("backend", "queue", "key", "started_at", name="bq_rate_window")]

    def __str__(self) -> str:
        return f"{self.queue}/{self.key} at {self.started_at}"


class WorkerRecord(models.Model):
    """A worker of the registry: written at start, refreshed by its heartbeat, marked
    stopped when it exits; one whose heartbeat stopped is shown as gone, later pruned."""

    worker_id = models.CharField(primary_key=True, max_length=100)
    backend = models.CharField(max_length=100)
    host = models.CharField(max_length=255)
    pid = models.IntegerField()
    queues = models.JSONField(default=list)
    concurrency = models.PositiveIntegerField(default=1)
    running = models.JSONField(default=list)  # ids of the jobs it runs now
    job_names = models.JSONField(default=list)  # the job names it has handlers for
    state = models.CharField(max_length=20, default="running")
    version = models.CharField(max_length=50, blank=True, default="")
    done = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "blamequeue_worker"
        default_permissions = ()
        indexes = [models.Index("backend", "last_seen", name="bq_worker_seen")]

    def __str__(self) -> str:
        return self.worker_id


class EffectMark(models.Model):
    """An ``@job(atomic=True)`` run's effects committed: one row per job id, written in the
    handler's transaction where the job's own ack cannot join it (the redis backend).

    The primary key refuses a second mark, so a second run of the same job (a redelivery, a
    zombie worker) rolls its writes back and completes the job with ``result`` instead.
    docs/effects.md says what each backend guarantees.
    """

    job_id = models.CharField(primary_key=True, max_length=26)
    backend = models.CharField(max_length=100)
    attempt = models.PositiveIntegerField()
    token = models.CharField(max_length=32)
    result = models.BinaryField(null=True, blank=True)
    content_type = models.CharField(max_length=100, default="application/json")
    content_encoding = models.CharField(max_length=30, default="utf-8")
    created_at = models.DateTimeField()

    class Meta:
        db_table = "blamequeue_effect"
        default_permissions = ()
        indexes = [models.Index("created_at", name="bq_effect_created")]

    def __str__(self) -> str:
        return f"effects of {self.job_id} (attempt {self.attempt})"
