"""Checkpoints of long jobs: the stored form of a value, its cap, and the hand-off of values
from a running handler to whoever writes them.

A checkpoint is JSON text (at most ``MAX_CHECKPOINT_BYTES`` of UTF-8) stored on the job and
fenced by the lease token like every write of an attempt; the next attempt reads it with its
lease (``Claimed.checkpoint``). In a worker the handler never writes it itself: it leaves the
latest value in the attempt's ``CheckpointSlot`` and the worker's main thread — the one that
already renews leases and sends acks — writes held values, at most once per throttle period
per job, batched across jobs, and takes the last one at the end of the attempt to store it
before the ack. So ``checkpoint()`` costs a handler no round trip, works the same from
``async def`` code, and a value is never lost to the throttle.

An encrypted job's checkpoint is stored sealed (``fernet:<token>`` around this JSON text):
the context seals it (``encryption.seal_checkpoint``) and every reader opens it with
``encryption.open_checkpoint``, so no engine has code of its own for it (docs/encryption.md).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from django_blamequeue.core import validation
from django_blamequeue.exceptions import ErrorCode, QueueError

#: The largest checkpoint, in bytes of its JSON text (64 KiB). A checkpoint is a cursor (an
#: offset, the last id done, a few counters) written up to a few times a second per job, not
#: a place for results: it rides on every claim of the job and on every write of it.
MAX_CHECKPOINT_BYTES = 65_536

#: ``writer(text)``: store ``text`` now, fenced; True if stored, False if the lease is gone.
Writer = Callable[[str], bool]


def encode(value: Any) -> str:
    """``value`` as the JSON text every engine stores, or ``QueueError`` (nothing written):
    ``BAD_CHECKPOINT`` if it is not JSON, ``CHECKPOINT_TOO_LARGE`` past the cap."""
    problem = validation.json_problem(value)
    if problem is not None:
        raise QueueError(ErrorCode.BAD_CHECKPOINT, f"a checkpoint {problem}")
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise QueueError(
            ErrorCode.BAD_CHECKPOINT,
            "a checkpoint must be JSON (dict, list, str, int, float, bool or None), "
            f"not {validation.shown(value)}: {exc}",
        ) from None
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    if size > MAX_CHECKPOINT_BYTES:
        raise QueueError(
            ErrorCode.CHECKPOINT_TOO_LARGE,
            f"a checkpoint is at most {MAX_CHECKPOINT_BYTES:,} bytes of JSON; this one is "
            f"{size:,} (store a cursor, not the data)",
        )
    return text


def decode(text: str | None) -> Any:
    """The value of stored checkpoint text (None for none)."""
    return None if text is None else json.loads(text)


class CheckpointSlot:
    """One attempt's latest checkpoint, between the handler and the writer.

    ``put`` leaves a value (the latest wins); with ``wait`` it answers a ``Future`` that
    resolves True once a write of that value (or a later one) is stored, False if the lease
    was lost or the attempt is over. A worker's slot has ``notify``: called when the slot
    gets a value to write after having none, or one someone waits for, so the main thread
    can schedule the write. A slot with ``writer`` instead (``testing.run_jobs``: nobody else
    runs) writes waited-for values itself; its runner takes the rest at the attempt's end.
    """

    __slots__ = (
        "_lock",
        "_pending",
        "_text",
        "_waiters",
        "closed",
        "last_write",
        "notify",
        "writer",
    )

    def __init__(
        self,
        notify: Callable[[CheckpointSlot, bool], None] | None = None,
        writer: Writer | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._text: str | None = None
        self._pending = False
        self._waiters: list[Future[bool]] = []
        self.closed = False  # the attempt is over: later values are dropped
        self.last_write = float("-inf")  # monotonic time of the last write taken (writer's)
        self.notify = notify
        self.writer = writer

    @property
    def pending(self) -> bool:
        return self._pending

    def put(self, text: str, *, wait: bool = False) -> Future[bool] | None:
        if self.writer is not None and wait:
            return self._write_inline(text)
        waiter: Future[bool] | None = Future() if wait else None
        with self._lock:
            if self.closed:
                if waiter is not None:
                    waiter.set_result(False)
                return waiter
            first = not self._pending
            self._text, self._pending = text, True
            if waiter is not None:
                self._waiters.append(waiter)
        if (first or wait) and self.notify is not None:
            self.notify(self, wait)
        return waiter

    def _write_inline(self, text: str) -> Future[bool]:
        assert self.writer is not None
        done: Future[bool] = Future()
        with self._lock:
            if self.closed:
                done.set_result(False)
                return done
            self._text, self._pending = None, False  # this later value supersedes a held one
        done.set_result(self.writer(text))
        return done

    def take(self, *, close: bool = False) -> tuple[str, list[Future[bool]]] | None:
        """The held value and its waiters, now the writer's (None if nothing is held);
        ``close`` ends the attempt: later ``put``s are dropped."""
        with self._lock:
            if close:
                self.closed = True
            if not self._pending:
                return None
            assert self._text is not None
            taken = (self._text, self._waiters)
            self._text, self._pending, self._waiters = None, False, []
        return taken

    def give_back(self, text: str, waiters: list[Future[bool]]) -> None:
        """A write that could not be sent: hold ``text`` again unless a later value came."""
        with self._lock:
            if self._pending:
                self._waiters = waiters + self._waiters  # the later value answers them
                return
            self._text, self._pending = text, True
            self._waiters = waiters + self._waiters


def resolve(waiters: list[Future[bool]], stored: bool) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(stored)
