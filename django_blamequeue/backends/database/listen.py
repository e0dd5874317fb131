"""LISTEN/NOTIFY for idle workers on PostgreSQL.

A thread holds its own autocommit connection (LISTEN is session state, so it cannot share
Django's connection, nor live behind a transaction-mode pooler: set ``"LISTEN": False`` there).
While it is connected ``listening`` is True and the worker waits a full poll interval between
claims, woken early by each notification; after a disconnect it reconnects with backoff and the
worker polls until the LISTEN is re-established.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import Any

from django.db import connections

logger = logging.getLogger("django_blamequeue.listen")


class PgListener:
    def __init__(self, db: str, channel: str, queues: Sequence[str]) -> None:
        self.db = db
        self.channel = channel
        self.queues = frozenset(queues)
        self.wake = threading.Event()
        self.listening = False
        self.reconnects = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: Any = None

    def start(self, wake: threading.Event) -> None:
        self.wake = wake
        self._thread = threading.Thread(target=self._run, name="blamequeue-listen", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken connection is gone either way
                conn.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _connect(self) -> Any:
        import psycopg

        params = connections[self.db].get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        conn = psycopg.connect(**params, autocommit=True)
        conn.execute(f'LISTEN "{self.channel}"')
        return conn

    def _run(self) -> None:
        delay = 0.1
        while not self._stop.is_set():
            try:
                self._conn = self._connect()
                self.listening = True
                delay = 0.1
                self.wake.set()  # anything enqueued while we were away: claim now
                while not self._stop.is_set():
                    for note in self._conn.notifies(timeout=1.0):
                        if not self.queues or note.payload in self.queues:
                            self.wake.set()
            except Exception as exc:
                if self._stop.is_set():
                    break
                if self.listening:
                    logger.warning("LISTEN connection lost (%s); polling until it is back", exc)
                self.listening = False
                self.reconnects += 1
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)
            finally:
                self.listening = False
                conn, self._conn = self._conn, None
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
