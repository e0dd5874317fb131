"""Shared state of the backends whose jobs are rows of a Django database.

``LedgerBase``: which database, which vendor, which job table, its clock, its wake-ups. The
local backend keeps its jobs in ``Job``; the SQS backend keeps its ledger in ``SqsJob`` with
the same columns, and runs the same code over it (``model`` and ``table`` say which).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, ClassVar

from django.db import InterfaceError, OperationalError, connections, transaction
from django.utils import timezone

from django_blamequeue.backends import wakeup
from django_blamequeue.backends.base import Backend
from django_blamequeue.backends.jobtable import prepared
from django_blamequeue.conf import BackendConfig
from django_blamequeue.core.records import Ack
from django_blamequeue.core.states import State
from django_blamequeue.models import Job, JobFields, OutboxEntry

CHANNEL = "blamequeue"
#: NOTIFY channel of control changes (pause, resume, limits): listening workers re-read them.
CONTROL_CHANNEL = "blamequeue_control"


class LedgerBase(Backend):
    """State and helpers shared by the parts that read and write a job table."""

    #: The job table's model: ``Job`` (local) or ``SqsJob`` (the SQS ledger).
    model: ClassVar[type[JobFields]] = Job
    unavailable_errors: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self.db: str = str(config.options.get("DATABASE", "default"))
        self.table: str = self.model._meta.db_table
        from django.conf import settings

        database = settings.DATABASES.get(self.db, {})
        self.is_postgres = "postgresql" in str(database.get("ENGINE", ""))
        #: Run the hot statements (enqueue, claim, ack) prepared (``prepared.py``).
        self.prepares = self.is_postgres and prepared.wanted(
            config.options.get("PREPARE"), database
        )

    # -- helpers ---------------------------------------------------------------------------
    @property
    def connection(self) -> Any:
        return connections[self.db]

    def jobs(self) -> Any:
        return self.model._default_manager.using(self.db)

    def now(self) -> datetime:
        return self._now(None)

    def _now(self, now: datetime | None) -> datetime:
        """The engine's clock. On SQLite the database lives on this host: its clock is ours."""
        if now is not None:
            return now
        if self.is_postgres:
            with self.connection.cursor() as cur:
                cur.execute("SELECT statement_timestamp()")
                value: datetime = cur.fetchone()[0]
                return value
        return timezone.now()

    def _fetch(
        self, statement: str, params: Sequence[Any], *, generic: bool = False
    ) -> list[tuple[Any, ...]]:
        """A hot statement's rows: prepared on PostgreSQL unless ``PREPARE`` is off
        (``prepared.fetch``), else through a Django cursor as any other statement."""
        if self.prepares:
            return prepared.fetch(self.connection, statement, params, generic=generic)
        with self.connection.cursor() as cur:
            cur.execute(statement, params)
            rows: list[tuple[Any, ...]] = cur.fetchall()
            return rows

    def _adapt(self, value: datetime | None) -> Any:
        if value is None:
            return None
        return self.connection.ops.adapt_datetimefield_value(value)

    def _notify(self, queues: Sequence[str]) -> None:
        """Wake idle workers on commit: NOTIFY (PostgreSQL) and in this process."""
        distinct = sorted(set(queues))
        if not distinct:
            return
        if self.is_postgres:
            with self.connection.cursor() as cur:
                for q in distinct:
                    cur.execute("SELECT pg_notify(%s, %s)", [CHANNEL, q])
        transaction.on_commit(lambda: wakeup.notify(distinct), using=self.db)

    def _outbox(self, entries: Iterable[tuple[str, str, str, dict[str, Any]]]) -> None:
        """Outbox rows ``(kind, backend, job id, body)`` in the current transaction; the
        relay is nudged once it commits."""
        if OutboxEntry.objects.using(self.db).add(entries):
            transaction.on_commit(self.hooks.outbox_written, using=self.db)

    def _made_pending(self, rows: Sequence[tuple[str, str]], now: datetime) -> None:
        """(job id, queue) of jobs this transaction made pending (available at ``now``) from
        a state that holds no message (blocked, waiting_children, failed). The local backend
        wakes workers; the SQS backend also sends their messages once the transaction
        commits."""
        self._notify([queue for _, queue in rows])

    def on_unavailable(self) -> None:
        """After a connection error outside a transaction, drop the connection to reconnect."""
        conn = self.connection
        if not conn.in_atomic_block:
            conn.close()

    # -- implemented by the mixins, declared here so each part type-checks alone ----------
    def cascade_cancel(self, ids: Sequence[str], now: datetime) -> int:
        raise NotImplementedError

    def cascade_children(self, parent_ids: Sequence[str], now: datetime) -> int:
        raise NotImplementedError

    def settle(self, parent_ids: Sequence[str], now: datetime) -> list[str]:
        raise NotImplementedError

    def release_dependants(self, done_ids: Sequence[str], now: datetime) -> list[str]:
        raise NotImplementedError

    def apply_fan_outs(self, acks: Sequence[Ack], now: datetime) -> dict[str, State | None]:
        raise NotImplementedError

    def record_children(self, child_ids: Sequence[str], now: datetime | None) -> set[str]:
        raise NotImplementedError

    def children_tally(self, parent_id: str) -> dict[str, int]:
        raise NotImplementedError

    def _rescue_rows(
        self, rows: Sequence[tuple[Any, ...]], t: datetime, max_stalled: int
    ) -> dict[State, list[tuple[Any, ...]]]:
        raise NotImplementedError
