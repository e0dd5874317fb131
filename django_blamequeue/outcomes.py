"""What becomes of runs: finished ones reaped and decided, stopped ones interrupted, and the
acks sent — the worker's main thread, the half of ``Consumer`` that ends attempts.

A mixin of ``worker.Consumer`` (its claiming half): both share the consumer's state, and every
decision about a run stays on that one thread. An ack goes only after the attempt's last
checkpoint is stored; one that cannot be sent stays for the next round (fenced by the lease
token, so sending it twice is safe).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

from . import effects, metrics
from .acking import PendingAcks, account
from .aio import EventLoop
from .backends.base import Backend
from .checkpointer import Checkpointer
from .core import lifecycle
from .counters import Counters
from .exceptions import ErrorCode, QueueError, WorkerShutdown
from .heartbeat import Heartbeat
from .probation import Probation
from .records import AckResult
from .runner import Handler, Run, is_async, transition_for
from .slots import SlotPool

logger = logging.getLogger("django_blamequeue.worker")


class Outcomes:
    """Ends attempts for ``worker.Consumer``, which sets all of these up."""

    backend: Backend
    handler: Handler | None
    counters: Counters
    heartbeat: Heartbeat
    checkpointer: Checkpointer
    pool: SlotPool
    loop: EventLoop
    _wake: threading.Event
    _finished: deque[Run]
    _running: dict[str, Run]
    _acks: PendingAcks
    _probation: Probation
    _grace_until: float | None
    _error_delay: float

    def _report(self, run: Run) -> None:
        """Called from a slot thread when a handler finished (and was not abandoned)."""
        self._finished.append(run)
        if not self._wake.is_set():  # set already: the main thread reaps this run too
            self._wake.set()

    def _reap(self) -> None:
        while self._finished:
            run = self._finished.popleft()
            assert run.outcome is not None
            if run.settled is not None:  # an atomic run acked (or lost) in its own transaction
                self._running.pop(run.claimed.job_id, None)
                self.checkpointer.end(run, keep=False)  # acked already: nothing to resume
                account(self.counters, self.backend.alias, run, effects.SETTLED, run.settled)
                continue
            self._decide(run, run.outcome)

    def _decide(self, run: Run, outcome: lifecycle.Outcome) -> None:
        transition = transition_for(run.claimed, run.definition, outcome)
        self._running.pop(run.claimed.job_id, None)
        self.checkpointer.end(run, keep=True)  # stored before the ack (``_flush``)
        self._acks.add(run, transition)

    def _interrupt(
        self,
        run: Run,
        exc_type: type[Exception] | type[BaseException],
        outcome: lifecycle.Outcome | None,
    ) -> None:
        """Take the decision away from the handler thread, free the slot, ack ``outcome``."""
        if self._probation.discard(run):
            pass  # held to run alone: it never started, no thread to interrupt
        elif not run.abandon(exc_type):  # type: ignore[arg-type]
            return  # it finished first; its outcome is already queued
        elif not is_async(run, self.handler):  # an async run's task was cancelled instead
            self.pool.replace_one()
        if outcome is None:  # lease lost: someone else owns the job; nothing to ack
            self._running.pop(run.claimed.job_id, None)
            self.checkpointer.end(run, keep=False)
            self.counters.lock_lost += 1
            if run.invoker is not None:
                effects.abandoned(run)  # its transaction rolls back: audit its LOCK_LOST
            if metrics.enabled:
                metrics.lease_lost(self.backend.alias, run.claimed.queue)
            logger.warning(
                "lost the lease of job %s; its run was abandoned",
                run.claimed.job_id,
                extra=_extra(run),
            )
            return
        self._decide(run, outcome)

    def _check_deadlines(self) -> None:
        for stop in self.heartbeat.deadlines(self._running, time.monotonic()):
            self.counters.timed_out += 1
            run = stop.run
            logger.warning(
                "job %s timed out after %.3g s",
                run.claimed.job_id,
                run.deadline - run.started if run.deadline else 0.0,
                extra=_extra(run),
            )
            self._interrupt(run, stop.exc_type, stop.outcome)

    def _heartbeat(self) -> None:
        if not self._running:
            return
        now = time.monotonic()
        try:
            for step in (self.heartbeat.renew, self.heartbeat.signals, self.checkpointer.write_due):
                for stop in step(self._running, now):
                    if stop.run.claimed.job_id in self._running:
                        self._interrupt(stop.run, stop.exc_type, stop.outcome)
        except Exception as exc:
            self._failed("heartbeat", exc)

    def _store_checkpoints(self) -> bool:
        """The last checkpoints of ended attempts, stored before their acks may go."""
        try:
            self.checkpointer.flush_final()
        except Exception as exc:  # keep the acks too: acked first, a value would be lost
            self._failed("storing checkpoints", exc)
            return False
        return True

    def _flush(self) -> None:
        if not self._acks or not self._store_checkpoints():
            return
        assert self.backend.resilience is not None
        acks = self._acks.batch()
        try:
            results = self.backend.resilience.call(lambda: self.backend.apply_many(acks))
        except Exception as exc:  # keep the acks; a re-sent ack is fenced, so retrying is safe
            self._failed("ack", exc)
            if not unavailable(exc):
                for run, _ in self._acks.refused(acks, exc):
                    logger.error(
                        "gave up the ack of job %s after refusals; its lease will expire and "
                        "the rescuer re-pend it",
                        *(run.claimed.job_id,),
                        extra=_extra(run),
                    )
            return
        self._error_delay = 0.0
        self._settle(results)

    def _settle(self, results: list[AckResult]) -> None:
        for run, transition, res in self._acks.applied(results):
            account(self.counters, self.backend.alias, run, transition, res)

    def _failed(self, what: str, exc: BaseException) -> None:
        """A backend call (or a whole round) failed: log it and back off (0.1 s doubling
        to 5 s); the caller keeps what it must send again."""
        self._error_delay = min(max(self._error_delay * 2, 0.1), 5.0)
        if unavailable(exc):
            logger.warning(
                "backend %r: %s; retrying in %.1f s", self.backend.alias, exc, self._error_delay
            )
        else:
            logger.error(
                "%s failed on backend %r; retrying in %.1f s",
                *(what, self.backend.alias, self._error_delay),
                exc_info=exc,
            )

    # -- shutdown --------------------------------------------------------------------------
    def _shutdown_step(self) -> bool:
        """While stopping: wait for handlers until the grace ends, then release the rest."""
        for held in self._probation.release_all():  # never started: give them back now
            self._decide(held, lifecycle.Released())
        now = time.monotonic()
        if self._running and self._grace_until is not None and now >= self._grace_until:
            for run in list(self._running.values()):
                self._interrupt(run, WorkerShutdown, lifecycle.Released())
        if self._running:
            self._check_deadlines()
            self._heartbeat()
            self._flush()
            return False
        for _ in range(3):
            self._flush()
            if not self._acks:
                break
            time.sleep(self._error_delay or 0.1)
        return True


def unavailable(exc: BaseException) -> bool:
    """The engine could not be reached (send again later), as opposed to a refusal."""
    return isinstance(exc, QueueError) and exc.code == ErrorCode.BACKEND_UNAVAILABLE


def _extra(run: Run) -> dict[str, object]:
    c = run.claimed
    return {"job_id": c.job_id, "queue": c.queue, "attempt": c.attempt}
