"""Circuit breaker and retry wrapper, one per backend (docs/concepts.md).

Engine errors are mapped to ``QueueError(BACKEND_UNAVAILABLE)`` here, at the boundary (a
missing table to ``NOT_MIGRATED``: no retry or breaker helps there, ``migrate`` does). The
breaker opens after ``threshold`` consecutive failures and refuses calls at once for
``reset_after`` seconds, then lets one trial call through (half-open). Only idempotent
operations are retried; leasing goes through the breaker alone, since a retried claim could
lease jobs whose answer was lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from django_blamequeue.backends import migration_state
from django_blamequeue.exceptions import ErrorCode, QueueError

if TYPE_CHECKING:
    from django_blamequeue.backends.base import Backend

logger = logging.getLogger("django_blamequeue.resilience")
T = TypeVar("T")

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


class CircuitBreaker:
    def __init__(self, name: str, *, threshold: int = 5, reset_after: float = 5.0) -> None:
        self.name = name
        self.threshold = threshold
        self.reset_after = reset_after
        self._failures = 0
        self._opened_at = 0.0
        self._state = CLOSED
        self._lock = threading.Lock()

    @property
    def state(self) -> str:
        with self._lock:
            if self._state == OPEN and time.monotonic() - self._opened_at >= self.reset_after:
                return HALF_OPEN
            return self._state

    def before(self, *, probe_after: float | None = None) -> None:
        """Refuse fast while open; in half-open let calls through as trials. With
        ``probe_after``, a call is a trial already once that long has passed since the last
        failure: a worker polling every second finds its engine back within a poll, not
        ``reset_after`` later."""
        if self.state == OPEN and not (
            probe_after is not None and time.monotonic() - self._opened_at >= probe_after
        ):
            raise QueueError(
                ErrorCode.BACKEND_UNAVAILABLE,
                f"backend {self.name!r} is unavailable (circuit open after "
                f"{self.threshold} consecutive failures; retrying in ≤{self.reset_after:g} s)",
            )

    def success(self) -> None:
        with self._lock:
            if self._state != CLOSED:
                logger.info("backend %r recovered; circuit closed", self.name)
            self._failures = 0
            self._state = CLOSED

    def failure(self) -> None:
        with self._lock:
            self._failures += 1
            if self._state == OPEN or self._failures >= self.threshold:
                if self._state != OPEN:
                    logger.warning("backend %r failing; circuit open", self.name)
                self._state = OPEN
                self._opened_at = time.monotonic()


class Resilience:
    def __init__(self, backend: Backend, *, retries: int = 2, retry_delay: float = 0.05) -> None:
        self.backend = backend
        self.breaker = CircuitBreaker(backend.alias)
        self.retries = retries
        self.retry_delay = retry_delay

    def call(
        self, fn: Callable[[], T], *, idempotent: bool = False, probe_after: float | None = None
    ) -> T:
        """``fn()`` through the breaker (``probe_after``: ``CircuitBreaker.before``)."""
        attempts = 1 + (self.retries if idempotent else 0)
        for attempt in range(1, attempts + 1):
            try:
                self.breaker.before(probe_after=probe_after)
            except QueueError:
                # The engine was failing: this thread's connection is likely dead too. Drop it
                # now, so that its trial call once the circuit half-opens starts on a fresh one
                # instead of failing on the stale one and opening the circuit again.
                self.backend.on_unavailable()
                raise
            try:
                value = fn()
            except Exception as exc:
                if migration_state.is_missing_schema(exc):  # not an outage: nothing to retry
                    raise QueueError(
                        ErrorCode.NOT_MIGRATED,
                        f"backend {self.backend.alias!r}: the django_blamequeue tables are "
                        f"missing or behind ({exc}): {migration_state.FIX}",
                    ) from exc
                if not isinstance(exc, self.backend.unavailable_errors):
                    raise
                self.breaker.failure()
                self.backend.on_unavailable()
                if attempt == attempts:
                    raise QueueError(
                        ErrorCode.BACKEND_UNAVAILABLE,
                        f"backend {self.backend.alias!r} is unavailable: {exc}",
                    ) from exc
                time.sleep(self.retry_delay * attempt)
                continue
            self.breaker.success()
            return value
        raise AssertionError("unreachable")  # pragma: no cover


# -- SQLite's write lock --------------------------------------------------------------------------
_LOCKED = ("database is locked", "database table is locked")


def is_locked(exc: BaseException) -> bool:
    """``exc``, or what it was raised from, is SQLite's "database is locked": another
    connection holds the one write lock longer than this one's busy timeout."""
    from django.db.utils import OperationalError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OperationalError) and any(t in str(seen) for t in _LOCKED):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def retry_while_locked[R](
    fn: Callable[[], R],
    *,
    tries: int = 8,
    delay: float = 0.05,
    wait: Callable[[float], object] = time.sleep,
) -> R:
    """``fn()``, tried again while SQLite answers "database is locked" (``delay`` doubling
    up to 1 s; 8 tries wait about 4 s in all). For writes that are whole transactions of
    their own, so that trying again repeats nothing; the last error is raised."""
    for attempt in range(1, tries + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt == tries or not is_locked(exc):
                raise
            logger.debug("database locked; trying again (%d/%d)", attempt, tries)
            wait(min(delay * 2 ** (attempt - 1), 1.0))
    raise AssertionError("unreachable")  # pragma: no cover
