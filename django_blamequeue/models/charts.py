"""The console's chart data: counts and histograms per queue, job name and time bucket."""

from __future__ import annotations

from django.db import models

from django_blamequeue.core.timeseries import SLOTS


class TimeBucket(models.Model):
    """One time bucket of one (queue, job name) on one backend whose data lives in a Django
    database (the local backend; the SQS backend keeps its own here too): added to by the
    workers' flushes, its depth set by the sweeper (``name`` ""), deleted once its resolution's
    window has passed (``core/timeseries.py``). ``w0…`` and ``r0…`` are the wait and run
    time histograms, one column per bucket of ``timeseries.BOUNDS``."""

    backend = models.CharField(max_length=100)
    queue = models.CharField(max_length=200)
    name = models.CharField(max_length=255, default="")
    step = models.PositiveIntegerField()  # seconds: 60, 600 or 3600
    start = models.DateTimeField()
    done = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    retried = models.PositiveIntegerField(default=0)
    cancelled = models.PositiveIntegerField(default=0)
    depth = models.PositiveIntegerField(null=True, blank=True)
    for _i in range(SLOTS):
        locals()[f"w{_i}"] = models.PositiveIntegerField(default=0)
        locals()[f"r{_i}"] = models.PositiveIntegerField(default=0)
    del _i

    class Meta:
        db_table = "blamequeue_time_bucket"
        default_permissions = ()
        constraints = [
            models.UniqueConstraint(
                "backend", "step", "start", "queue", "name", name="bq_bucket_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.name or '*'} {self.step}s at {self.start:%Y-%m-%d %H:%M}"
