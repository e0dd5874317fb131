"""Schedules, queue control rows, rate windows and the worker registry."""

from __future__ import annotations

from django.db import models


class Schedule(models.Model):
    """A recurring job (docs/schedules.md): a cron expression or a fixed interval, in a timezone.

    Rows from ``SCHEDULES`` are synced with ``source="settings"``, periodic jobs declared in
    code (``@job(schedule=...)``, ``@periodic``) with ``source="code"``; rows made in the admin
    have ``source="admin"``. ``last_fired_at`` is compare-and-set in the enqueue's
    transaction, so any number of sweepers fire each occurrence once. Under
    ``overlap="skip"`` an occurrence due while ``last_job_id`` is still waiting or running is
    skipped (counted in ``skipped``), not fired.
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
    overlap = models.CharField(
        max_length=10,
        choices=[("skip", "skip while the last run is pending or running"), ("allow", "allow")],
        default="skip",
    )
    expires = models.FloatField(
        null=True, blank=True, help_text="seconds: a run not started by then is cancelled"
    )
    last_job_id = models.CharField(max_length=26, null=True, blank=True)
    last_job_backend = models.CharField(max_length=100, null=True, blank=True)
    skipped = models.PositiveIntegerField(default=0, help_text="fires skipped: still running")
    last_skipped_at = models.DateTimeField(null=True, blank=True)
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
    # [[pattern, weight], ...]: weighted shares between keys (docs/weighted-shares.md).
    key_weights = models.JSONField(null=True, blank=True)
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
