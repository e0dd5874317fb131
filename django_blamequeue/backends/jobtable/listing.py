"""Operations and read-outs shared by every backend whose jobs are rows of a Django database
(the local backend, the SQS ledger): purge, look-ups, the DLQ, stats and retention."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, Min, Q, TextField

from django_blamequeue import audit
from django_blamequeue.backends.jobtable.manifests import Manifests
from django_blamequeue.backends.jobtable.rows import info_from_model, to_dt
from django_blamequeue.backends.jobtable.table import JobTable, Released
from django_blamequeue.core.records import Backlog, JobInfo, PruneReport, QueueStats
from django_blamequeue.core.rules import DLQ_RETRY_RESETS
from django_blamequeue.core.states import ACTIVE, WAITING, Reason, State
from django_blamequeue.models import FlowDependency, OutboxEntry

_ACTIVE = [s.value for s in ACTIVE]

#: A pending SQLite row whose ``available_at`` no reading parses (text written past the API),
#: among the rows the claim takes for later. Its value gets a leading space: text that sorts
#: before every time, so the next claim takes it and fails it alone as ``bad_job`` (the
#: claim reads each field on its own). Left as it was, it would wait for ever and keep a
#: ``--burst`` worker from exiting.
_SURFACE_UNREADABLE = (
    "UPDATE {table} SET available_at = ' ' || CAST(available_at AS TEXT) "
    "WHERE state = 'pending' AND queue IN ({queues}) AND available_at > %s "
    "AND (julianday(available_at) IS NULL "
    "OR available_at NOT GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*')"
)


def _earliest() -> Min:
    """The earliest ``available_at`` as stored: Django's own reading of an SQLite time
    fails on text that is no time (``'NoneType' object has no attribute 'utcoffset'``), so
    the value is read as text and through :func:`_time`."""
    return Min("available_at", output_field=TextField())


def _until(when: datetime | None, now: datetime) -> float | None:
    return None if when is None else (when - now).total_seconds()


def _age(since: datetime | None, now: datetime) -> float | None:
    return None if since is None else max(0.0, (now - since).total_seconds())


def _time(value: Any) -> datetime | None:
    """An aggregate's time, None where the stored value is no time (see ``_earliest``)."""
    try:
        return to_dt(value)
    except (TypeError, ValueError, OverflowError):
        return None


class Listing:
    """What operators read and do on a job table, beyond a job's lifecycle."""

    def __init__(self, table: JobTable, manifests: Manifests, released: Released) -> None:
        self.table = table
        self.manifests = manifests  # a parent's look-up shows its children's tally
        self.released = released  # a DLQ retry makes failed jobs pending

    def purge(self, queue: str, created_before: datetime | None = None) -> int:
        waiting = Q(queue=queue, state__in=[s.value for s in WAITING])
        if created_before is not None:
            waiting &= Q(created_at__lte=created_before)
        with transaction.atomic(using=self.table.db):
            ids = list(self.table.jobs().filter(waiting).values_list("id", flat=True))
            for start in range(0, len(ids), 5000):
                chunk = ids[start : start + 5000]
                FlowDependency.objects.using(self.table.db).filter(job_id__in=chunk).delete()
                self.table.jobs().filter(
                    id__in=chunk, state__in=[s.value for s in WAITING]
                ).delete()
            audit.record(
                [
                    audit.Event(
                        action=audit.PURGE,
                        queue=queue,
                        backend=self.table.alias,
                        data={"count": len(ids)},
                    )
                ],
                using=self.table.db,
            )
        return len(ids)

    def get(self, job_id: str) -> JobInfo | None:
        job = self.table.jobs().filter(id=job_id).first()
        if job is None:
            return None
        deps = FlowDependency.objects.using(self.table.db).filter(job_id=job_id, kind="dag")
        tally = self.manifests.children_tally(job_id) if job.flow_phase else None
        return info_from_model(job, self.table.alias, [d.depends_on_id for d in deps], tally)

    def jobs_about(self, about: str, limit: int) -> list[JobInfo]:
        """Newest first, on the ``(about, id)`` index."""
        rows = self.table.jobs().filter(about=about).order_by("-id")[:limit]
        return [info_from_model(j, self.table.alias) for j in rows]

    def size(self, queue: str) -> int:
        # An OR, not ``state IN``: pending rows are ``bq_job_queue_state``'s, inflight rows
        # ``bq_job_inflight``'s (a BitmapOr of the two on PostgreSQL).
        live = Q(queue=queue, state=State.PENDING) | Q(queue=queue, state=State.INFLIGHT)
        n: int = self.table.jobs().filter(live).count()
        return n

    def dlq_list(self, queue: str | None, limit: int = 100, offset: int = 0) -> list[JobInfo]:
        rows = self._failed(queue).order_by("id")
        return [info_from_model(j, self.table.alias) for j in rows[offset : offset + limit]]

    def dlq_size(self, queue: str | None) -> int:
        n: int = self._failed(queue).count()
        return n

    def _failed(self, queue: str | None) -> Any:
        """The DLQ of ``queue``, or of every queue."""
        rows = self.table.jobs().filter(state=State.FAILED)
        return rows if queue is None else rows.filter(queue=queue)

    def dlq_retry(self, job_id: str, now: datetime | None = None) -> bool:
        return self._dlq_retry(self.table.jobs().filter(id=job_id), now) == 1

    def dlq_retry_all(self, queue: str, now: datetime | None = None) -> int:
        return self._dlq_retry(self.table.jobs().filter(queue=queue), now)

    def dlq_retry_many(self, job_ids: Sequence[str], now: datetime | None = None) -> int:
        return self._dlq_retry(self.table.jobs().filter(id__in=list(job_ids)), now)

    def _dlq_retry(self, qs: Any, now: datetime | None) -> int:
        with transaction.atomic(using=self.table.db):
            t = self.table.clock(now)
            rows = list(qs.filter(state=State.FAILED).values_list("id", "queue", "dedupe_key"))
            held = self._held_keys([(q, k) for _, q, k in rows if k])
            # rule: dlq-retry. A dedupe key now held by a newer live job stays in the DLQ.
            rows = [r for r in rows if not r[2] or (r[1], r[2]) not in held]
            ids = [r[0] for r in rows]
            resets = {k: t if v == "now" else v for k, v in DLQ_RETRY_RESETS.items()}
            n = 0
            for start in range(0, len(ids), 5000):
                n += (
                    self.table.jobs()
                    .filter(id__in=ids[start : start + 5000], state=State.FAILED)
                    .update(**resets, updated_at=t)
                )
            self.released([(r[0], r[1]) for r in rows], t)
            audit.record(
                [
                    audit.Event(
                        action=audit.DLQ_RETRY, job_id=r[0], queue=r[1], backend=self.table.alias
                    )
                    for r in rows
                ],
                using=self.table.db,
            )
        return n

    def _held_keys(self, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        held: set[tuple[str, str]] = set()
        for queue, key in set(keys):
            if self.table.jobs().filter(queue=queue, dedupe_key=key, state__in=_ACTIVE).exists():
                held.add((queue, key))
        return held

    def backlog(self, queues: Sequence[str]) -> Backlog:
        """One aggregate over the queues' live rows, and the unsent outbox rows (flow reports
        on their way count as due work: they may release or settle jobs here)."""
        t = self.table.clock(None)
        self._surface_unreadable(queues, t)
        later = Q(state=State.PENDING, available_at__gt=t)
        # A pending job past its expiry is neither: no claim leases it, the sweeper cancels it.
        gone = Q(state=State.PENDING, expires_at__lte=t)
        found = (
            self.table.jobs()
            .filter(  # an OR per state: each on its own partial index (see ``size``)
                Q(queue__in=list(queues), state=State.INFLIGHT)
                | Q(queue__in=list(queues), state__in=[State.PENDING, State.WAITING_CHILDREN])
            )
            .aggregate(
                due=Count("id", filter=~later & ~gone), delayed=Count("id", filter=later & ~gone),
                first=Min("available_at", filter=later & ~gone, output_field=TextField()),
            )
        )  # fmt: skip
        unsent: int = OutboxEntry.objects.using(self.table.db).filter(sent_at__isnull=True).count()
        return Backlog(
            due=found["due"] + unsent, delayed=found["delayed"], next_due_at=_time(found["first"])
        )

    def _surface_unreadable(self, queues: Sequence[str], now: datetime) -> None:
        """See ``_SURFACE_UNREADABLE``; PostgreSQL's typed column holds no such value."""
        if self.table.is_postgres or not queues:
            return
        statement = _SURFACE_UNREADABLE.format(
            table=self.table.name, queues=", ".join(["%s"] * len(queues))
        )
        with self.table.connection.cursor() as cur:
            cur.execute(statement, [*queues, self.table.adapt(now)])

    def stats(self) -> list[QueueStats]:
        counts: dict[str, dict[str, int]] = {}
        for queue, state, n in (
            self.table.jobs().order_by().values_list("queue", "state").annotate(n=Count("id"))
        ):
            counts.setdefault(queue, {s.value: 0 for s in State})[state] = n
        oldest = {
            q: _time(m)
            for q, m in self.table.jobs()
            .filter(state=State.PENDING)
            .order_by()
            .values_list("queue")
            .annotate(m=_earliest())
            .values_list("queue", "m")
        }
        now = self.table.now()
        later = {
            q: (n, _time(first))
            for q, n, first in self.table.jobs()
            .filter(state=State.PENDING, available_at__gt=now)
            .order_by()
            .values_list("queue")
            .annotate(n=Count("id"), first=_earliest())
            .values_list("queue", "n", "first")
        }
        finished = Q(state__in=[State.DONE, State.FAILED]) | Q(
            state=State.CANCELLED, reason=Reason.EXPIRED.value
        )
        recent: dict[tuple[str, str], int] = {
            (q, s): n
            for q, s, n in self.table.jobs()
            .filter(finished, finished_at__gte=now - timedelta(hours=1))
            .order_by()
            .values_list("queue", "state")
            .annotate(n=Count("id"))
        }
        return [
            QueueStats(
                backend=self.table.alias,
                queue=q,
                counts=c,
                oldest_pending_age=_age(oldest.get(q), now),
                done_last_hour=recent.get((q, State.DONE), 0),
                failed_last_hour=recent.get((q, State.FAILED), 0),
                expired_last_hour=recent.get((q, State.CANCELLED), 0),
                delayed=later[q][0] if q in later else 0,
                next_delayed_in=_until(later[q][1], now) if q in later else None,
            )
            for q, c in sorted(counts.items())
        ]

    def prune(
        self,
        *,
        done_before: datetime | None,
        cancelled_before: datetime | None,
        failed_before: datetime | None,
        limit: int = 5000,
    ) -> PruneReport:
        total = 0
        for state, before in (
            (State.DONE, done_before),
            (State.CANCELLED, cancelled_before),
            (State.FAILED, failed_before),
        ):
            if before is None:
                continue
            with transaction.atomic(using=self.table.db):
                ids = list(
                    self.table.jobs()
                    .filter(state=state, finished_at__lt=before)
                    .order_by()
                    .values_list("id", flat=True)[:limit]
                )
                if ids:
                    deps = FlowDependency.objects.using(self.table.db)
                    deps.filter(job_id__in=ids).delete()
                    deps.filter(depends_on_id__in=ids, kind="dag").delete()
                    total += self.table.jobs().filter(id__in=ids, state=state).delete()[0]
        return PruneReport(jobs=total)
