"""Is the worker's loop getting anywhere? Its engine's outages, and the ``stalled`` verdict.

A healthy loop with a free slot asks its engine for jobs every poll interval. So the loop notes
each answer it gets (``progressed``: a claim or an ack the engine answered, or a round with
nothing it may ask: every queue paused, the rate window closed). When calls fail, it backs off
at most one poll interval (``backoff``), so it claims again within a poll of its engine's
return, and it logs the outage once, again every ``REMIND`` seconds, and when it ends — not at
every failed call.

The registry's heartbeat thread asks for the verdict (``state``): a loop that has had no answer
for ``WORKER_STALLED_AFTER`` seconds, with no handler running here and jobs due on its queues,
is ``stalled``. That is a worker that looks alive and does nothing: a bug in the loop, or its
engine unreachable while the registry's database is not (SQS, whose ledger is there). The
loop cannot report its own stall; a thread beside it can.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("django_blamequeue.worker")

MIN_BACKOFF = 0.1  # seconds after the first failure; doubled after each one
MAX_BACKOFF = 5.0  # and never more than this (nor than the poll interval)
REMIND = 30.0  # seconds between the log lines of one ongoing outage
ASK_TIMEOUT = 2.0  # seconds the stall check waits for the backlog


class Liveness:
    def __init__(self, alias: str, poll_interval: float, stalled_after: float) -> None:
        self.alias = alias
        self.stalled_after = stalled_after
        self.max_backoff = min(MAX_BACKOFF, max(poll_interval, MIN_BACKOFF))
        self.delay = 0.0  # the loop's current back-off (0: none)
        self._lock = threading.Lock()
        self._answered_at = time.monotonic()
        self._failing_since: float | None = None
        self._failures = 0
        self._reminded_at = 0.0
        self._stalled_since: float | None = None
        self._asking: threading.Thread | None = None

    # -- the loop's side ------------------------------------------------------------------
    def progressed(self) -> None:
        """The engine answered (or there was nothing the loop may ask it)."""
        now = time.monotonic()
        with self._lock:
            self._answered_at = now
            since, failures = self._failing_since, self._failures
            self._failing_since, self._failures, self.delay = None, 0, 0.0
        if since is not None:
            logger.warning(
                "backend %r answers again after %.1f s (%d failed call(s)); claiming",
                *(self.alias, now - since, failures),
            )

    def backoff(
        self, what: str, exc: BaseException, *, unavailable: bool, traceback: bool = True
    ) -> float:
        """A call failed: the delay before the next round (0.1 s doubling, at most one poll
        interval and 5 s), logged once per ``REMIND`` while it lasts (``traceback``: with
        the exception's, unless it says all there is, as ``NOT_MIGRATED`` does)."""
        now = time.monotonic()
        with self._lock:
            self.delay = min(max(self.delay * 2, MIN_BACKOFF), self.max_backoff)
            first = self._failing_since is None
            if first:
                self._failing_since = now
            self._failures += 1
            remind = first or now - self._reminded_at >= REMIND
            if remind:
                self._reminded_at = now
            since, failures = self._failing_since or now, self._failures
        if not remind:
            return self.delay
        tail = "" if first else f" (failing for {now - since:.0f} s, {failures} calls)"
        if unavailable:
            logger.warning(
                "backend %r: %s; retrying in %.1f s%s", self.alias, exc, self.delay, tail
            )
        elif not traceback:
            message = getattr(exc, "message", str(exc))
            logger.error("%s failed: %s; retrying in %.1f s%s", what, message, self.delay, tail)
        else:
            logger.error(
                "%s failed on backend %r; retrying in %.1f s%s",
                *(what, self.alias, self.delay, tail),
                exc_info=exc,
            )
        return self.delay

    # -- the registry thread's side -------------------------------------------------------
    def idle(self) -> None:
        """A round with nothing the loop may ask (every queue paused, the rate window closed):
        as good as an answer for the verdict, without ending an outage."""
        with self._lock:
            self._answered_at = time.monotonic()

    def quiet_for(self) -> float:
        """Seconds since the engine last answered the loop."""
        with self._lock:
            return time.monotonic() - self._answered_at

    def state(self, *, running: int, due: Callable[[], int], describe: Callable[[], str]) -> str:
        """``stalled`` or ``running``. ``running``: handlers running here (a loop waiting
        for them is not stalled); ``due()``: jobs due on its queues, asked only when the loop
        has been quiet too long (an engine that cannot answer gives no verdict);
        ``describe()``: the loop's state, for the log line."""
        quiet = self.quiet_for()
        n = 0
        if running == 0 and quiet >= self.stalled_after:
            n = self._ask(due)
        stalled = n > 0
        now = time.monotonic()
        if stalled and self._stalled_since is None:
            self._stalled_since = now
            logger.error(
                "worker loop stalled: backend %r has answered no claim or ack for %.0f s "
                "while %d job(s) are due and no handler runs here (%s)",
                *(self.alias, quiet, n, describe()),
            )
        elif not stalled and self._stalled_since is not None:
            logger.warning(
                "worker loop claims again after being stalled for %.0f s",
                now - self._stalled_since,
            )
            self._stalled_since = None
        return "stalled" if stalled else "running"

    def _ask(self, due: Callable[[], int]) -> int:
        """``due()`` on a thread of its own, waited for ``ASK_TIMEOUT``: an engine that hangs
        (paused, partitioned) must not hold the registry's heartbeat back. No answer (late,
        failed, or a previous question still hanging) counts as nothing due."""
        if self._asking is not None and self._asking.is_alive():
            return 0
        answer: list[int] = []

        def ask() -> None:
            try:
                answer.append(due())
            except Exception:
                logger.debug("reading the backlog for the stall check failed", exc_info=True)

        self._asking = threading.Thread(target=ask, name="blamequeue-stall-check", daemon=True)
        self._asking.start()
        self._asking.join(ASK_TIMEOUT)
        return answer[0] if answer else 0
