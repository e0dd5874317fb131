"""Pub/sub wake-ups for idle workers: every script that makes jobs ready publishes their queue
names on ``P:wake``.

A thread holds its own subscription (a dedicated connection from the backend's pool). While
it is subscribed ``listening`` is True; after a disconnect it resubscribes with backoff
(0.1 s doubling to 1 s: one connection attempt a second is cheap, and the worker learns within
a second that Redis is back), waking the worker at once when it is, and the worker polls at
its poll interval meanwhile. A message lost in between costs at most one poll interval.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import RedisBase

logger = logging.getLogger("django_blamequeue.listen")


class RedisListener:
    def __init__(self, backend: RedisBase, queues: Sequence[str]) -> None:
        self.backend = backend
        self.queues = frozenset(q.encode() for q in queues)
        self.wake = threading.Event()
        self.listening = False
        self.reconnects = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pubsub: Any = None

    def start(self, wake: threading.Event) -> None:
        self.wake = wake
        self._thread = threading.Thread(target=self._run, name="blamequeue-listen", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        delay = 0.1
        while not self._stop.is_set():
            try:
                self._pubsub = self.backend.client.pubsub(ignore_subscribe_messages=True)
                self._pubsub.subscribe(self.backend.keys.wake)
                self.listening = True
                delay = 0.1
                self.wake.set()  # anything made ready while we were away: claim now
                while not self._stop.is_set():
                    message = self._pubsub.get_message(timeout=1.0)
                    if message is not None and (
                        not self.queues or message.get("data") in self.queues
                    ):
                        self.wake.set()
            except Exception as exc:
                if self._stop.is_set():
                    break
                if self.listening:
                    logger.warning("redis subscription lost (%s); polling until it is back", exc)
                self.listening = False
                self.reconnects += 1
                self._stop.wait(delay)
                delay = min(delay * 2, 1.0)
            finally:
                self.listening = False
                pubsub, self._pubsub = self._pubsub, None
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        pubsub.close()
