"""The console's chart buckets for a backend whose data lives in a Django database (the local
backend, the SQS ledger's): ``blamequeue_time_bucket`` rows, one per (resolution, bucket,
queue, job name), added to by one upsert per flush and deleted once their window has passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.core.timeseries import (
    COUNTS,
    RESOLUTIONS,
    SLOTS,
    Bucket,
    Sample,
    floor,
    merged,
)
from django_blamequeue.models import TimeBucket

BUCKETS = TimeBucket._meta.db_table
WAITS = tuple(f"w{i}" for i in range(SLOTS))
RUNS = tuple(f"r{i}" for i in range(SLOTS))
ADDED = (*COUNTS, *WAITS, *RUNS)
COLUMNS = ("backend", "step", "start", "queue", "name", *ADDED, "depth")
#: Rows per INSERT: every row has ``len(COLUMNS)`` parameters (SQLite allows 32,766).
CHUNK = 200


def upsert(n: int) -> str:
    """INSERT of ``n`` rows that adds to a bucket already there (the depth replaces it)."""
    row = "(" + ", ".join(["%s"] * len(COLUMNS)) + ")"
    added = ", ".join(f"{c} = {BUCKETS}.{c} + excluded.{c}" for c in ADDED)
    return (
        f"INSERT INTO {BUCKETS} ({', '.join(COLUMNS)}) VALUES {', '.join([row] * n)} "
        "ON CONFLICT (backend, step, start, queue, name) DO UPDATE SET "
        f"{added}, depth = COALESCE(excluded.depth, {BUCKETS}.depth)"
    )


class TimeSeries:
    """The chart buckets of one backend (its alias) in its database."""

    def __init__(self, table: JobTable) -> None:
        self.table = table

    def record(self, samples: Sequence[Sample], now: datetime | None) -> None:
        """Add ``samples`` into the buckets holding ``now`` (the engine's clock) at every
        resolution: one transaction, rows in key order (concurrent flushes never deadlock)."""
        found = [s for s in merged(samples) if not s.empty]
        if not found:
            return
        t = self.table.clock(now)
        rows: list[list[Any]] = []
        for r in RESOLUTIONS:
            start = self.table.adapt(floor(t, r.step))
            for s in found:
                wait = s.wait or (0,) * SLOTS
                run = s.run or (0,) * SLOTS
                key = [self.table.alias, r.step, start, s.queue, s.name]
                counts = [s.done, s.failed, s.retried, s.cancelled]
                rows.append([*key, *counts, *wait, *run, s.depth])
        with transaction.atomic(using=self.table.db), self.table.connection.cursor() as cur:
            for i in range(0, len(rows), CHUNK):
                chunk = rows[i : i + CHUNK]
                cur.execute(upsert(len(chunk)), [p for row in chunk for p in row])

    def read(
        self, step: int, since: datetime, until: datetime, queue: str | None, name: str | None
    ) -> list[Bucket]:
        qs = TimeBucket.objects.using(self.table.db).filter(
            backend=self.table.alias, step=step, start__gte=since, start__lt=until
        )
        if queue is not None:
            qs = qs.filter(queue=queue)
        if name is not None:  # a queue's depth comes with its names (none without a queue)
            qs = qs.filter(name__in=[name, ""] if queue is not None else [name])
        fields = ("queue", "name", "start", *ADDED, "depth")
        return [
            Bucket(
                queue=row[0],
                name=row[1],
                start=row[2],
                step=step,
                **dict(zip(COUNTS, row[3:7], strict=True)),
                wait=tuple(row[7 : 7 + SLOTS]),
                run=tuple(row[7 + SLOTS : 7 + 2 * SLOTS]),
                depth=row[-1],
            )
            for row in qs.order_by().values_list(*fields)
        ]

    def prune(self, now: datetime | None) -> int:
        """Delete the buckets past each resolution's window; answers how many."""
        t = self.table.clock(now)
        rows = TimeBucket.objects.using(self.table.db).filter(backend=self.table.alias)
        deleted = 0
        for r in RESOLUTIONS:
            old = rows.filter(step=r.step, start__lt=t - timedelta(seconds=r.keep))
            deleted += old.delete()[0]
        return deleted
