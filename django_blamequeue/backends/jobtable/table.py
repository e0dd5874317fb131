"""Where a backend's job rows live: the model (``Job`` for the local backend, ``SqsJob`` for
the SQS ledger: the same columns), its Django database and that database's vendor; the clock
and the statement helpers every part of the job table uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from django_blamequeue.backends import wakeup
from django_blamequeue.backends.hooks import current_hooks
from django_blamequeue.backends.jobtable import prepared
from django_blamequeue.conf import BackendConfig
from django_blamequeue.models import JobFields, OutboxEntry

CHANNEL = "blamequeue"
#: NOTIFY channel of control changes (pause, resume, limits): listening workers re-read them.
CONTROL_CHANNEL = "blamequeue_control"

#: What the backend holding the table does for ``(job id, queue)`` that a transaction made
#: pending (at ``now``) from a state that holds no message (blocked, waiting_children,
#: failed): the local backend wakes workers; the SQS backend sends their messages once the
#: transaction commits.
Released = Callable[[Sequence[tuple[str, str]], datetime], None]


class JobTable:
    """One job table, where its rows live; every part of ``jobtable`` holds one."""

    def __init__(
        self, model: type[JobFields], config: BackendConfig, *, notifies: bool = True
    ) -> None:
        self.model = model
        #: The backend's alias: the rows, control rows and audit events carry it.
        self.alias = config.alias
        self.db = str(config.options.get("DATABASE", "default"))
        self.name: str = model._meta.db_table
        database = settings.DATABASES.get(self.db, {})
        self.is_postgres = "postgresql" in str(database.get("ENGINE", ""))
        #: Run the hot statements (enqueue, claim, ack) prepared (``prepared.py``).
        self.prepares = self.is_postgres and prepared.wanted(
            config.options.get("PREPARE"), database
        )
        #: Wake-ups go out as NOTIFY too (PostgreSQL; the local backend's LISTENing workers).
        self.notifies = notifies and self.is_postgres

    @property
    def connection(self) -> Any:
        return connections[self.db]

    def jobs(self) -> Any:
        return self.model._default_manager.using(self.db)

    def now(self) -> datetime:
        return self.clock(None)

    def clock(self, now: datetime | None) -> datetime:
        """``now`` if given, else the engine's clock. On SQLite the database lives on this
        host: its clock is ours."""
        if now is not None:
            return now
        if self.is_postgres:
            with self.connection.cursor() as cur:
                cur.execute("SELECT statement_timestamp()")
                value: datetime = cur.fetchone()[0]
                return value
        return timezone.now()

    def fetch(
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

    def plan_generic(self) -> None:
        """Set the generic plan settings for the rest of the caller's transaction, once for
        several hot statements (``fetch(..., generic=True)`` sets them per statement). Only
        where statements are prepared: unprepared ones are planned at each call anyway."""
        if self.prepares:
            prepared.plan_generic(self.connection)

    def adapt(self, value: datetime | None) -> Any:
        if value is None:
            return None
        return self.connection.ops.adapt_datetimefield_value(value)

    def notify(self, queues: Sequence[str]) -> None:
        """Wake idle workers on commit: NOTIFY (``notifies``) and in this process."""
        distinct = sorted(set(queues))
        if not distinct:
            return
        if self.notifies:
            with self.connection.cursor() as cur:
                for q in distinct:
                    cur.execute("SELECT pg_notify(%s, %s)", [CHANNEL, q])
        transaction.on_commit(lambda: wakeup.notify(distinct), using=self.db)

    def outbox(self, entries: Iterable[tuple[str, str, str, dict[str, Any]]]) -> None:
        """Outbox rows ``(kind, backend, job id, body)`` in the current transaction; the
        relay is nudged once it commits."""
        if OutboxEntry.objects.using(self.db).add(entries):
            transaction.on_commit(current_hooks().outbox_written, using=self.db)

    def on_unavailable(self) -> None:
        """After a connection error outside a transaction, drop the connection to reconnect."""
        conn = self.connection
        if not conn.in_atomic_block:
            conn.close()
