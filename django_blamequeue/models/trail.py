"""What happened: the audit log, each job's attempts, ``django.tasks`` attempts, the marks of
atomic jobs' effects."""

from __future__ import annotations

from django.db import models


class AuditEvent(models.Model):
    """One audited event (docs/observability.md); read-only once written."""

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


class JobAttempt(models.Model):
    """One attempt of a job, for its history (``Backend.attempts``; docs/admin.md): written by
    the engine in the transaction of the ack that ended it (or of the rescue that found its
    lease expired), for the local backend and the SQS ledger alike (``backend`` says whose).

    Which attempts are kept is ``ATTEMPT_HISTORY``: those that did not end done (default),
    all, or none. ``attempt`` restarts at 1 after a DLQ retry; the row id orders the history.
    Pruned with the audit rows (``RETENTION["AUDIT"]``) and deleted with their job.
    """

    backend = models.CharField(max_length=100)
    job_id = models.CharField(max_length=26)
    attempt = models.PositiveIntegerField()
    outcome = models.CharField(max_length=20)  # done | retried | failed | cancelled | stalled
    worker = models.CharField(max_length=255, null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField()
    reason = models.CharField(max_length=30, null=True, blank=True)
    error_type = models.CharField(max_length=255, null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    traceback = models.TextField(null=True, blank=True)

    class Meta:
        db_table = "blamequeue_attempt"
        default_permissions = ()
        indexes = [
            models.Index("job_id", "id", name="bq_attempt_job"),
            models.Index("finished_at", name="bq_attempt_finished"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} #{self.attempt} {self.outcome}"


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
