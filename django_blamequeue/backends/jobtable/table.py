"""Where a backend's job rows live: the model (``Job`` for the local backend, ``SqsJob`` for
the SQS ledger: the same columns), its Django database and that database's vendor; the clock
and the statement helpers every part of the job table uses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connections, transaction
from django.utils import timezone

from django_blamequeue.backends import wakeup
from django_blamequeue.backends.hooks import current_hooks
from django_blamequeue.backends.jobtable import prepared
from django_blamequeue.conf import BackendConfig
from django_blamequeue.models import JobFields, OutboxEntry

logger = logging.getLogger("django_blamequeue.backends")

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
        #: ``ensure_statistics`` has looked (once per process; nothing to do off PostgreSQL).
        self.statistics_checked = not self.is_postgres

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

    def ensure_statistics(self) -> None:
        """Before this process's first claim: ``ANALYZE`` the table if PostgreSQL has no
        statistics for it yet (a fresh install, a ``TRUNCATE``), once per process.

        The claim is planned once per connection and that plan kept. Made on a table without
        statistics, it believes a queue holds one pending job, and with a backlog of about
        16,000 the planner found reading all of them through the smaller (queue, state) index
        and sorting them cheaper than the claim index's order: 13 ms a claim of 5, growing
        with the backlog, until autovacuum's first ANALYZE (up to a minute, or more on a busy
        server). One ANALYZE samples at most 30,000 rows (≈ 0.1 s) and replaces every
        connection's plan. A role that does not own the table gets PostgreSQL's own warning
        and nothing analysed (autovacuum still will); another error is logged and the claim
        goes on; with the server away the next claim looks again."""
        if self.statistics_checked:
            return
        self.statistics_checked = True
        try:
            with transaction.atomic(using=self.db), self.connection.cursor() as cur:
                cur.execute(
                    "SELECT c.reltuples < 0 OR NOT EXISTS (SELECT 1 FROM pg_stats s "
                    "WHERE s.schemaname = n.nspname AND s.tablename = c.relname) "
                    "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE c.oid = %s::regclass",
                    [self.name],
                )
                row = cur.fetchone()
                if row and row[0]:
                    cur.execute(f"ANALYZE {self.connection.ops.quote_name(self.name)}")
                    logger.info("ANALYZE %s: PostgreSQL had no statistics for it", self.name)
        except (OperationalError, InterfaceError):  # the server is away: look at the next claim
            self.statistics_checked = False
        except DatabaseError as exc:
            logger.warning(
                "could not analyse %s (%s): claims may read the whole backlog until "
                "autovacuum analyses it",
                self.name,
                exc,
            )

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
