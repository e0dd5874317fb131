"""The redis backend's connection and its scripts: one Lua script per atomic step, and what
follows each script.

A script may leave work for Python once it returned: audit events to record (in the
backend's Django ``DATABASE``; the signal goes out after that database commits), in-process
consumers to wake, the relay to nudge (the script wrote outbox entries), children on other
backends to cancel (a cascade reached them). ``after`` does all of it, in that order.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from redis.exceptions import NoScriptError

from django_blamequeue import audit
from django_blamequeue.backends import wakeup
from django_blamequeue.backends.hooks import current_hooks
from django_blamequeue.backends.redis import lua
from django_blamequeue.backends.redis.codec import dumps
from django_blamequeue.backends.redis.connection import connect
from django_blamequeue.backends.redis.keys import Keys

logger = logging.getLogger("django_blamequeue.redis")


class ScriptRunner:
    """The client (connected on first use) and the scripts registered on it."""

    def __init__(self, alias: str, options: Mapping[str, Any], keys: Keys, audit_db: str) -> None:
        self.alias = alias
        self.options = options
        self.keys = keys
        self.audit_db = audit_db
        self._owns_client = not options.get("CONNECTION")
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._lock = threading.Lock()

    # -- the connection ------------------------------------------------------------------
    @property
    def client(self) -> Any:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = connect(self.alias, self.options)
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

    def run(
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
            self.after([reply])
        return reply

    def run_many(
        self, name: str, calls: Sequence[tuple[Any, Sequence[bytes]]], now: datetime | None = None
    ) -> list[lua.Reply]:
        """Several calls of one script in one MULTI/EXEC: all of them or none."""
        if len(calls) == 1:
            return [self.run(name, *calls[0], now, after=False)]
        script = self.script(name)
        try:
            return self._transaction(script, calls, now)
        except NoScriptError:
            # A cluster pipeline sends EVALSHA without loading the script first (a fresh or a
            # just promoted primary lacks it). Every call of the block is that script, so every
            # one failed alike and nothing ran: load it and send the block again.
            self.client.script_load(script.script)
            return self._transaction(script, calls, now)

    def _transaction(
        self, script: Any, calls: Sequence[tuple[Any, Sequence[bytes]]], now: datetime | None
    ) -> list[lua.Reply]:
        pipe = self.client.pipeline(transaction=True)
        for spec, blobs in calls:
            script(keys=[self.keys.prefix], args=self._args(now, spec, blobs), client=pipe)
        return [lua.unpack(raw, self.alias) for raw in pipe.execute()]

    def after(self, replies: Iterable[lua.Reply], events: Sequence[audit.Event] = ()) -> None:
        replies = list(replies)
        evs = [*events, *(e for r in replies for e in r.events)]
        if evs:
            audit.record(evs, using=self.audit_db)
        woken = {q for r in replies for q in r.woken}
        if woken:
            wakeup.notify(woken)
        if any(r.outboxed for r in replies):
            current_hooks().outbox_written()
        remote = [pair for r in replies for pair in r.remote]
        if remote:
            current_hooks().cancel_elsewhere(remote)
