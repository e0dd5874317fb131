"""Pub/sub wake-ups for idle workers: every script that makes jobs ready publishes their queue
names on ``P:wake``. The listener subscribes on a dedicated connection from the backend's pool
and retries at least once a second, so a worker learns within a second that Redis is back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from django_blamequeue.backends.listen import CONTROL, Listener

if TYPE_CHECKING:
    from django_blamequeue.backends.redis.backend import RedisBackend


class RedisListener(Listener):
    what = "redis subscription"
    max_delay = 1.0

    def __init__(self, backend: RedisBackend, queues: Sequence[str]) -> None:
        super().__init__(queues)
        self.backend = backend

    def _subscribe(self) -> Any:
        pubsub = self.backend.client.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.backend.keys.wake, self.backend.keys.control_wake)
        return pubsub

    def _messages(self, handle: Any, timeout: float) -> Iterable[str]:
        message = handle.get_message(timeout=timeout)
        if message is None:
            return ()
        data, channel = message.get("data"), message.get("channel")
        text = data.decode() if isinstance(data, bytes) else str(data)
        if channel in (self.backend.keys.control_wake, self.backend.keys.control_wake.encode()):
            text = CONTROL + text
        return (text,)
