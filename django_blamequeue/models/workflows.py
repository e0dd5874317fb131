"""A durable workflow's memory: its recorded steps, and the events sent to workflows.

Both live in a Django database whatever the job's backend (the local backend's database,
the SQS ledger's, ``default`` for redis), beside the rows an atomic step writes, so a step's
record commits in the same transaction as its effects (docs/workflows.md).
"""

from __future__ import annotations

from django.db import models

#: What a step row records.
STEP_KINDS = ("step", "atomic", "sleep", "event", "child")
#: ``done``: its result is final; ``failed``: its last try raised (the next replay runs it
#: again); ``waiting``: a timer, an event or a child not there yet; ``timed_out``: a wait
#: whose timeout passed (replays raise ``WaitTimeout`` again); ``raised``: a child that failed
#: or was cancelled (its end state in ``event_name``; replays raise ``ChildFailed`` again).
STEP_STATUSES = ("done", "failed", "waiting", "timed_out", "raised")


class WorkflowStep(models.Model):
    """One recorded step of a durable job, keyed by (job, name, occurrence) and by its place
    in the replay order (``seq``). The unique keys are what make a step run once: the first
    run to commit a step's row owns it; any other finds it and takes its result."""

    job_id = models.CharField(max_length=26)
    backend = models.CharField(max_length=100)
    seq = models.PositiveIntegerField()
    name = models.CharField(max_length=255)
    occurrence = models.PositiveIntegerField(default=0)
    kind = models.CharField(max_length=10, choices=[(k, k) for k in STEP_KINDS])
    status = models.CharField(max_length=10, choices=[(s, s) for s in STEP_STATUSES])
    attempt = models.PositiveIntegerField()
    #: The step's result as JSON text (read back exactly as written, like checkpoints). A
    #: seam for payload encryption: every read and write goes through ``jobs/workflow/store``.
    result = models.TextField(null=True, blank=True)
    result_bytes = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    #: A timer's due time, a wait's deadline (the engine's clock).
    wake_at = models.DateTimeField(null=True, blank=True)
    event_name = models.CharField(max_length=255, blank=True, default="")
    event_key = models.CharField(max_length=255, blank=True, default="")
    child_id = models.CharField(max_length=26, blank=True, default="")
    child_backend = models.CharField(max_length=100, blank=True, default="")

    class Meta:
        db_table = "blamequeue_workflow_step"
        default_permissions = ()
        ordering = ["job_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["job_id", "seq"], name="bq_step_seq"),
            models.UniqueConstraint(fields=["job_id", "name", "occurrence"], name="bq_step_key"),
        ]
        indexes = [
            models.Index(
                "event_name",
                "event_key",
                name="bq_step_waiting",
                condition=models.Q(status="waiting"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} step {self.seq} {self.name}"


class WorkflowEvent(models.Model):
    """An event sent with ``queue.send_event``: delivered to one waiting workflow (its
    ``consumed_by``), or kept until ``expires_at`` for the first one that waits for it."""

    name = models.CharField(max_length=255)
    key = models.CharField(max_length=255, blank=True, default="")
    payload = models.TextField(null=True, blank=True)
    sent_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    sent_by = models.CharField(max_length=150, blank=True, default="")
    consumed_by = models.CharField(max_length=26, null=True, blank=True)
    consumed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "blamequeue_workflow_event"
        default_permissions = ()
        ordering = ["id"]
        indexes = [
            models.Index(
                "name",
                "key",
                "id",
                name="bq_event_open",
                condition=models.Q(consumed_by__isnull=True),
            ),
            models.Index("expires_at", name="bq_event_expires"),
        ]

    def __str__(self) -> str:
        return f"event {self.name}:{self.key}"
