"""The local backend: jobs are rows of the project's own database (SQLite or PostgreSQL).

The job table is the queue itself: transactional, LISTEN-able on PostgreSQL, cheap to poll on
SQLite. Each verb is one short transaction on the configured database; enqueue joins the
caller's (``atomic(savepoint=False)``), so a job enqueued inside ``transaction.atomic()`` is a
row of that transaction and rolls back with it.

What the local backend shares with the SQS ledger it holds as the parts of
``backends/jobtable`` and hands those verbs to them; what is written here is its own: the
one-statement enqueue, the claim, the combined ack-and-claim, the rescuer's pass and LISTEN.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from time import perf_counter
from typing import Any

from django.db import InterfaceError, OperationalError, transaction

from django_blamequeue import audit
from django_blamequeue.backends import wakeup
from django_blamequeue.backends.database.listen import PgListener
from django_blamequeue.backends.jobtable import effects, rotation, sql
from django_blamequeue.backends.jobtable.claim_start import ClaimStart, Points
from django_blamequeue.backends.jobtable.engine import JobTableBackend
from django_blamequeue.backends.jobtable.leases import RESCUE_COLUMNS
from django_blamequeue.backends.jobtable.rows import claimed_from_pg_row, claimed_from_row
from django_blamequeue.backends.jobtable.table import CHANNEL, CONTROL_CHANNEL, JobTable
from django_blamequeue.conf import BackendConfig
from django_blamequeue.core.limits import QueueLimits
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import (
    Ack,
    AckResult,
    Claimed,
    EffectsFence,
    EnqueuedJob,
    KeyRotation,
    NewJob,
    RescueReport,
)
from django_blamequeue.core.states import State
from django_blamequeue.models import Job


class DatabaseBackend(JobTableBackend):
    """The local backend: SQLite or PostgreSQL, through Django's own connections."""

    protocol = "local"
    transactional_enqueue = True
    supports_flows = True
    supports_apply_and_claim = True
    supports_key_rotation = True
    effects_with_ack = True
    unavailable_errors: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)

    def __init__(self, config: BackendConfig) -> None:
        table = JobTable(Job, config)
        listen = table.is_postgres and bool(config.options.get("LISTEN", True))
        super().__init__(config, table, self._released, listen=listen)
        self.database = self.db
        self.supports_listen = listen
        self.cheap_polling = not table.is_postgres
        # where the next PostgreSQL claim reads from
        self.claim_start = ClaimStart(config.options.get("CLAIM_ONWARD_AFTER_MS", 5.0))

    def _released(self, rows: Sequence[tuple[str, str]], now: datetime) -> None:
        """Jobs a transaction made pending from a state that holds no message: the table is
        the queue, so waking workers is all they need."""
        self.jobtable.notify([queue for _, queue in rows])

    # -- enqueue ---------------------------------------------------------------------------
    def enqueue_many(
        self,
        jobs: Sequence[NewJob],
        now: datetime | None = None,
        *,
        events: Sequence[audit.Event] = (),
    ) -> list[EnqueuedJob]:
        if not jobs:
            return []
        # Jobs neither blocked nor delayed wake idle workers at commit. A job deduplicated
        # away, or one whose run_at is still ahead, makes that one empty claim.
        wake = sorted({j.queue for j in jobs if not (j.blocked or j.delay)})
        if self.inserts.one_statement(jobs, events):
            self.inserts.insert_rows(jobs, now, wake)  # autocommit: the INSERT is the transaction
            wakeup.notify(wake)
            return [
                EnqueuedJob(job_id=j.job_id, queue_name=j.queue, backend=self.alias) for j in jobs
            ]
        if self.inserts.one_upsert(jobs, events):
            answer, _ = self.inserts.insert(jobs, now, wake)  # autocommit, as above
            wakeup.notify(wake)
            return [answer[jobs[0].job_id]]
        # A unique job that may be refused (DUPLICATE) runs in a savepoint, so a caller's
        # transaction that catches the refusal goes on.
        savepoint = any(j.unique_mode == "reject" for j in jobs)
        with transaction.atomic(using=self.db, savepoint=savepoint):
            answer, _ = self.inserts.insert(jobs, now, wake)
            transaction.on_commit(lambda: wakeup.notify(wake), using=self.db)
            self.inserts.record_enqueue(jobs, answer, events)
        return [answer[j.job_id] for j in jobs]

    # -- leasing ---------------------------------------------------------------------------
    def claim(
        self,
        queues: Sequence[str],
        limit: int,
        lease_s: float,
        now: datetime | None = None,
        *,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> list[Claimed]:
        if limit <= 0 or not queues:
            return []
        self.jobtable.ensure_statistics()
        with transaction.atomic(using=self.db):
            return self._claim(queues, limit, lease_s, now, limits)

    def apply_and_claim(
        self,
        acks: Sequence[Ack],
        queues: Sequence[str],
        limit: int,
        lease_s: float,
        now: datetime | None = None,
        *,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> tuple[list[AckResult], list[Claimed]]:
        """``apply_many`` then ``claim``, in one transaction: one commit (one WAL flush) per
        worker round instead of two. Both or neither: after an error the acks are re-sent
        (the fence makes that safe) and nothing was leased."""
        if not acks and (limit <= 0 or not queues):
            return [], []
        both = bool(acks) and limit > 0 and bool(queues)
        if limit > 0:
            self.jobtable.ensure_statistics()
        with transaction.atomic(using=self.db):
            if both:  # one round trip for the plan settings of both statements
                self.jobtable.plan_generic()
                if self.acks.one_statement(acks) and not (limits and set(queues) & set(limits)):
                    return self._acks_and_claim(acks, queues, limit, lease_s, now)
            results = self.acks.apply(acks, now, planned=both) if acks else []
            claimed = (
                self._claim(queues, limit, lease_s, now, limits, planned=both)
                if limit > 0 and queues
                else []
            )
        return results, claimed

    def _claim(
        self,
        queues: Sequence[str],
        limit: int,
        lease_s: float,
        now: datetime | None,
        limits: Mapping[str, QueueLimits] | None = None,
        *,
        planned: bool = False,
    ) -> list[Claimed]:
        """The claim, inside the caller's transaction: the queues named in ``limits`` under
        their limits (``jobtable/limited.py``), then the others with what is left of
        ``limit``. ``planned``: the generic plan settings are already set."""
        table = self.jobtable
        limited = [q for q in queues if limits and q in limits]
        qs = [q for q in queues if not (limits and q in limits)]
        claimed = self.limited.claim(limited, limit, lease_s, now, limits or {}) if limited else []
        limit -= len(claimed)
        if qs and limit > 0 and table.is_postgres:
            claimed += self._claim_postgresql(qs, limit, lease_s, now, planned)
        elif qs and limit > 0:
            t = table.clock(now)
            expires = t + timedelta(seconds=lease_s)
            a = table.adapt
            params = [a(expires), a(t), a(t), *qs, self.alias, a(t), a(t), limit]
            with table.connection.cursor() as cur:
                cur.execute(sql.claim_sqlite(len(qs)), params)
                claimed += [claimed_from_row(r) for r in cur.fetchall()]
        return self._started(claimed)

    def _started(self, claimed: list[Claimed]) -> list[Claimed]:
        """The claimed jobs in claim order, their start audited (same transaction)."""
        claimed.sort(key=lambda c: (-c.priority, c.available_at or c.lease_expires_at, c.job_id))
        if claimed:
            audit.record(audit.start_events(claimed, self.alias), using=self.db)
        return claimed

    def _acks_and_claim(
        self,
        acks: Sequence[Ack],
        queues: Sequence[str],
        limit: int,
        lease_s: float,
        now: datetime | None,
    ) -> tuple[list[AckResult], list[Claimed]]:
        """``apply_and_claim`` on PostgreSQL as one statement (``sql.ack_and_claim_postgresql``)
        in the caller's transaction, which already runs under the plan settings; what the acks
        set off (``Acks.finish``) follows in the same transaction."""
        points = self.claim_start.points(queues)
        varying, params = self.acks.rows_postgresql(acks)
        statement = sql.ack_and_claim_postgresql(varying, limit, points is not None)
        params += [now, *self._claim_params(queues, lease_s, now, points)]
        claimed: list[Claimed] = []
        applied: dict[str, tuple[Any, ...]] = {}
        seconds = 0.0
        for row in self.jobtable.fetch(statement, params):
            if row[0] == sql.LEASED:
                claimed.append(claimed_from_pg_row(row[sql.CLAIMED_COLUMNS]))
            elif row[0] == sql.ACKED:
                applied[row[sql.ACKED_FIRST]] = tuple(row[sql.ACKED_COLUMNS])
            else:
                seconds = row[-1]
        self.claim_start.note(claimed, seconds, from_start=points is None)
        results = self.acks.finish(acks, applied, now)
        return results, self._started(claimed)

    def _claim_params(
        self, queues: Sequence[str], lease_s: float, now: datetime | None, points: Points | None
    ) -> list[Any]:
        """The params of the claim from the start (``points`` None) or onward."""
        update: list[Any] = [now, float(lease_s), now, now]
        if points is None:
            return [list(queues), self.alias, now, now, *update]
        return [
            list(queues),
            points.prios,
            points.times,
            points.ids,
            self.alias,
            *[now] * 6,
            *update,
        ]

    def _claim_postgresql(
        self,
        queues: list[str],
        limit: int,
        lease_s: float,
        now: datetime | None,
        planned: bool = False,
    ) -> list[Claimed]:
        """The unlimited claim on PostgreSQL: from the start of each queue, or onward from
        the last job claimed there while claims from the start are slow (``claim_start.py``)."""
        points = self.claim_start.points(queues)
        if points is None:
            statement = sql.claim_postgresql(limit)
        else:
            statement = sql.claim_postgresql_onward(limit)
        params = self._claim_params(queues, lease_s, now, points)
        t0 = perf_counter()
        rows = self.jobtable.fetch(statement, params, generic=not planned)
        elapsed = perf_counter() - t0
        claimed = [claimed_from_pg_row(r) for r in rows]
        self.claim_start.note(claimed, elapsed, from_start=points is None)
        return claimed

    def scout_claim_points(self) -> int:
        """The sweeper's scout (``claim_start.py``): while this process's claims start after
        a point, read the first claimable job of each such queue from the start, without a
        lock, and move a point back before a job it skipped. Answers the points moved."""
        queues = self.claim_start.scouted_queues()
        if not queues:
            return 0
        t0 = perf_counter()
        with self.jobtable.connection.cursor() as cur:
            cur.execute(sql.SCOUT_POSTGRESQL, [queues])
            firsts = cur.fetchall()
        return self.claim_start.scouted(firsts, perf_counter() - t0)

    def apply_many(self, acks: Sequence[Ack], now: datetime | None = None) -> list[AckResult]:
        if not acks:
            return []
        with transaction.atomic(using=self.db):
            return self.acks.apply(acks, now)

    def fence_effects(self, ack: Ack, *, attempt: int, now: datetime | None = None) -> EffectsFence:
        effects.require_transaction(self.jobtable)
        [result] = self.acks.apply([ack], now)
        return effects.answer(result)

    def extend_lease(
        self, job_id: str, token: str, seconds: float, now: datetime | None = None
    ) -> bool:
        return self.leases.extend(job_id, token, seconds, now)

    def renew_leases(
        self, leases: Sequence[tuple[str, str]], seconds: float, now: datetime | None = None
    ) -> frozenset[str]:
        return self.leases.renew(leases, seconds, now)

    def rescue_expired(
        self, now: datetime | None = None, limit: int = 1000, *, max_stalled: int = 1
    ) -> RescueReport:
        with transaction.atomic(using=self.db):
            t = self.jobtable.clock(now)
            qs = self.jobtable.jobs().filter(state=State.INFLIGHT, lease_expires_at__lt=t)
            qs = qs.order_by("lease_expires_at")
            if self.jobtable.is_postgres:
                qs = qs.select_for_update(skip_locked=True)
            rows = list(qs.values_list(*RESCUE_COLUMNS)[:limit])
            groups = self.leases.rescue_rows(rows, t, max_stalled)
        return RescueReport(
            repended=len(groups[State.PENDING]),
            failed=len(groups[State.FAILED]),
            cancelled=len(groups[State.CANCELLED]),
        )

    def expire(self, now: datetime | None = None, limit: int = 500) -> list[str]:
        return self.expiry.expire(now, limit)

    # -- key rotation, wake-ups ------------------------------------------------------------
    def rotate_keys(
        self,
        payload: Callable[[Encoded], Encoded],
        text: Callable[[str | None], str | None],
        *,
        after: str = "",
        limit: int = 500,
    ) -> KeyRotation:
        return rotation.rotate(self.jobtable, payload, text, after=after, limit=limit)

    def listener(self, queues: Sequence[str]) -> Any:
        if not self.supports_listen:
            return None
        return PgListener(self.db, CHANNEL, queues, control=CONTROL_CHANNEL)


__all__ = ["DatabaseBackend"]
