"""The redis backend's shared state: its client, its scripts, and what follows each script.

A script may leave work for Python once it returned: audit events to record (in the
backend's Django ``DATABASE``; the signal goes out after that database commits), in-process
consumers to wake, the relay to nudge (the script wrote outbox entries), children on other
backends to cancel (a cascade reached them). ``_after`` does all of it, in that order.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from django_blamequeue import audit
from django_blamequeue.backends import wakeup
from django_blamequeue.backends.base import Backend
from django_blamequeue.backends.redis import lua
from django_blamequeue.backends.redis.codec import dumps
from django_blamequeue.backends.redis.connection import UNAVAILABLE, connect, warnings
from django_blamequeue.backends.redis.keys import Keys
from django_blamequeue.backends.redis.listen import RedisListener
from django_blamequeue.conf import BackendConfig

logger = logging.getLogger("django_blamequeue.redis")


class RedisBase(Backend):
    protocol = "redis"
    supports_listen = True
    supports_flows = True
    supports_apply_and_claim = True
    has_outbox = True
    #: How idle workers are woken (the worker's banner shows it).
    wake_up = "pub/sub (SUBSCRIBE)"
    unavailable_errors: tuple[type[BaseException], ...] = UNAVAILABLE

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        options = config.options
        self.keys = Keys(str(options.get("KEY_PREFIX") or "blamequeue"))
        #: The Django database of this backend's audit rows (and of the outbox table an
        #: enqueue inside ``transaction.atomic()`` goes through).
        self.audit_db = str(options.get("DATABASE") or "default")
        self._owns_client = not options.get("CONNECTION")
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._warned = False

    # -- the connection ------------------------------------------------------------------
    @property
    def client(self) -> Any:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = connect(self.alias, self.config.options)
                client = self._client
        return client

    def script(self, name: str) -> Any:
        found = self._scripts.get(name)
        if found is None:
            found = self._scripts[name] = self.client.register_script(lua.sources()[name])
        return found

    def on_unavailable(self) -> None:
        """Drop the idle pooled connections, so the next call connects afresh."""
        pool = getattr(self._client, "connection_pool", None)
        if pool is not None:
            try:
                pool.disconnect(inuse_connections=False)
            except Exception:  # the pool is being rebuilt anyway
                logger.debug("redis pool disconnect failed", exc_info=True)

    def close(self) -> None:
        client, self._client = self._client, None
        self._scripts = {}
        if client is not None and self._owns_client:
            client.close()

    # -- running scripts -----------------------------------------------------------------
    def _args(self, now: datetime | None, spec: Any, blobs: Sequence[bytes]) -> list[Any]:
        return [*lua.header(now, self.alias, audit.needed(audit.ENQUEUE)), dumps(spec), *blobs]

    def _run(
        self,
        name: str,
        spec: Any = (),
        blobs: Sequence[bytes] = (),
        now: datetime | None = None,
        *,
        after: bool = True,
    ) -> lua.Reply:
        """Run one script with ``spec`` (its JSON argument) and ``blobs``; unless ``after``
        is False, do what it left for Python."""
        raw = self.script(name)(keys=[self.keys.prefix], args=self._args(now, spec, blobs))
        reply = lua.unpack(raw, self.alias)
        if after:
            self._after([reply])
        return reply

    def _run_many(
        self, name: str, calls: Sequence[tuple[Any, Sequence[bytes]]], now: datetime | None = None
    ) -> list[lua.Reply]:
        """Several calls of one script in one MULTI/EXEC: all of them or none."""
        if len(calls) == 1:
            return [self._run(name, *calls[0], now, after=False)]
        script = self.script(name)
        pipe = self.client.pipeline(transaction=True)
        for spec, blobs in calls:
            script(keys=[self.keys.prefix], args=self._args(now, spec, blobs), client=pipe)
        return [lua.unpack(raw, self.alias) for raw in pipe.execute()]

    def _after(self, replies: Iterable[lua.Reply], events: Sequence[audit.Event] = ()) -> None:
        replies = list(replies)
        evs = [*events, *(e for r in replies for e in r.events)]
        if evs:
            audit.record(evs, using=self.audit_db)
        woken = {q for r in replies for q in r.woken}
        if woken:
            wakeup.notify(woken)
        if any(r.outboxed for r in replies):
            self.hooks.outbox_written()
        remote = [pair for r in replies for pair in r.remote]
        if remote:
            self.hooks.cancel_elsewhere(remote)

    # -- clock, checks, wake-ups ---------------------------------------------------------
    def now(self) -> datetime:
        seconds, micros = self.client.time()
        return datetime.fromtimestamp(int(seconds), UTC).replace(microsecond=int(micros))

    def check(self, queues: Sequence[str] = ()) -> Iterable[Any]:
        """W004 unless ``maxmemory-policy`` is ``noeviction``; W005 when ``appendonly no``."""
        return warnings(self.client, self.alias)

    def deployment_warnings(self) -> list[str]:
        """The check's messages as text (the worker's banner and start-up log)."""
        try:
            return [str(w.msg) for w in self.check()]
        except Exception as exc:  # INFO refused (ACL) or unreachable: say so, do not fail
            return [f"redis backend {self.alias!r}: could not read the server's INFO ({exc})"]

    def listener(self, queues: Sequence[str]) -> Any:
        """A pub/sub listener for idle workers; logs the deployment warnings once."""
        if not self._warned:
            self._warned = True
            for message in self.deployment_warnings():
                logger.warning("%s", message)

        return RedisListener(self, queues)
