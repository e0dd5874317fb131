"""The local backend's shared state: which database, which vendor, its clock, its wake-ups."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import InterfaceError, OperationalError, connections, transaction
from django.utils import timezone

from ... import wakeup
from ...conf import BackendConfig
from ...models import Job
from ..base import Backend

CHANNEL = "blamequeue"


class LocalBase(Backend):
    """State and helpers shared by the local backend's parts (verbs live in the mixins)."""

    protocol = "local"
    transactional_enqueue = True
    unavailable_errors: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self.db: str = str(config.options.get("DATABASE", "default"))
        self.database = self.db
        from django.conf import settings

        engine = str(settings.DATABASES.get(self.db, {}).get("ENGINE", ""))
        self.is_postgres = "postgresql" in engine
        self.supports_listen = self.is_postgres and bool(config.options.get("LISTEN", True))
        self.cheap_polling = not self.is_postgres
        self.supports_apply_and_claim = True

    # -- helpers ---------------------------------------------------------------------------
    @property
    def connection(self) -> Any:
        return connections[self.db]

    def jobs(self) -> Any:
        return Job.objects.using(self.db)

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
