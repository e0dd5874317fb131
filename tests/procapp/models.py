"""What the process tests' handlers leave behind: one effect per job, and every re-delivery."""

from __future__ import annotations

from django.db import models


class SideEffect(models.Model):
    """The work of a job. ``job_id`` is unique: a second application cannot be stored."""

    job_id = models.CharField(max_length=26, unique=True)
    pid = models.IntegerField()  # the worker process that did it
    token = models.CharField(max_length=32)
    attempt = models.PositiveIntegerField()
    host_clock = models.FloatField()  # the worker's time.time(), to show a skewed clock

    def __str__(self) -> str:
        return f"{self.job_id} by {self.pid}"


class Redelivery(models.Model):
    """A run that found its job's effect already stored by an earlier run (``first_pid``)."""

    job_id = models.CharField(max_length=26)
    pid = models.IntegerField()
    token = models.CharField(max_length=32)
    first_pid = models.IntegerField()
    first_token = models.CharField(max_length=32)

    def __str__(self) -> str:
        return f"{self.job_id} again by {self.pid} (first {self.first_pid})"


class Write(models.Model):
    """A handler's write with no unique constraint: a second application is a second row.

    The effects tests (``@job(atomic=True)``) count them per job: exactly one set of writes
    per job where the handler is atomic, more where a plain one ran again.
    """

    job_id = models.CharField(max_length=26, db_index=True)
    attempt = models.PositiveIntegerField()
    token = models.CharField(max_length=32)
    pid = models.IntegerField(default=0)
    tag = models.CharField(max_length=50, default="")

    def __str__(self) -> str:
        return f"{self.job_id} attempt {self.attempt}"
