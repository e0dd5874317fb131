"""LISTEN/NOTIFY for idle workers on PostgreSQL.

The listener holds its own autocommit connection (LISTEN is session state, so it cannot share
Django's connection, nor live behind a transaction-mode pooler: set ``"LISTEN": False`` there).
Every committed enqueue sends ``NOTIFY blamequeue, '<queue>'``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connections

from django_blamequeue.backends.listen import CONTROL, Listener


class PgListener(Listener):
    what = "LISTEN connection"

    def __init__(
        self, db: str, channel: str, queues: Sequence[str], control: str | None = None
    ) -> None:
        super().__init__(queues)
        self.db = db
        self.channel = channel
        self.control = control  # the channel of pause / resume / limit changes

    def _subscribe(self) -> Any:
        import psycopg

        params = connections[self.db].get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        conn = psycopg.connect(**params, autocommit=True)
        conn.execute(f'LISTEN "{self.channel}"')
        if self.control:
            conn.execute(f'LISTEN "{self.control}"')
        return conn

    def _messages(self, handle: Any, timeout: float) -> Iterable[str]:
        return (
            CONTROL + note.payload if note.channel == self.control else note.payload
            for note in handle.notifies(timeout=timeout)
        )
