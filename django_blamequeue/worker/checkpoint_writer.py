"""The worker's side of checkpoints: its main thread writes what handlers left in their slots.

Handlers only hand values over (``checkpoints.CheckpointSlot``); this module, run by the main
thread next to the lease renewals, writes them:

- while a run is going, its latest value at most once per throttle period (the first at once,
  one someone waits for at once), all runs' due values in one ``save_checkpoints`` call. A value
  refused there means the lease is lost: the run is stopped like one whose renewal failed;
- when an attempt ends, whatever the outcome, its last value joins a final batch that the
  consumer stores *before* it sends the acks: a job retried, released or rescued can only be
  claimed again after its last checkpoint is stored, so the next attempt reads it.

A kill -9 loses at most the values of the last throttle period (``checkpoint(wait=True)``:
none), never a job: the lease expires and the next attempt resumes from what was stored.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future

from django_blamequeue.backends.base import Backend
from django_blamequeue.context import JobContext
from django_blamequeue.core.checkpoints import CheckpointSlot, resolve
from django_blamequeue.exceptions import LeaseLost, QueueError
from django_blamequeue.worker.execution import Run
from django_blamequeue.worker.heartbeat import Stop

logger = logging.getLogger("django_blamequeue.worker")

#: (run, JSON text, waiters) taken from a slot, on its way to the backend.
Taken = tuple[Run, str, list[Future[bool]]]


class Checkpointer:
    def __init__(self, backend: Backend, throttle: float, wake: threading.Event) -> None:
        self.backend = backend
        self.throttle = throttle
        self._wake = wake
        self._noted: deque[tuple[JobContext, bool]] = deque()  # appended by handler threads
        self._held: dict[str, Run] = {}  # main thread only, like the rest below
        self._urgent: set[str] = set()
        self._final: list[Taken] = []

    def attach(self, run: Run) -> None:
        """Have the run's first checkpoint make a slot whose values this checkpointer writes
        (a bound method made once: no closure per run, most runs take no checkpoint)."""
        run.ctx.on_checkpoint = self._note

    def _note(self, ctx: JobContext, urgent: bool) -> None:
        """From a handler: a value to write (``urgent``: someone waits for it)."""
        self._noted.append((ctx, urgent))
        self._wake.set()

    # -- while runs go -----------------------------------------------------------------------
    def write_due(self, running: Mapping[str, Run], now: float) -> list[Stop]:
        """Write the values due (one call); answer the runs whose lease turned out lost.
        Raises ``QueueError`` when the backend cannot be asked: the values are held again."""
        while self._noted:
            ctx, urgent = self._noted.popleft()
            run = running.get(ctx.job_id)
            if run is None or run.ctx is not ctx:  # its attempt ended: ``end`` took the value
                continue
            self._held[run.claimed.job_id] = run
            if urgent:
                self._urgent.add(run.claimed.job_id)
        items: list[Taken] = []
        for job_id, run in list(self._held.items()):
            if running.get(job_id) is not run:  # its attempt ended: ``end`` took the value
                self._forget(job_id)
                continue
            slot = _slot(run)
            if job_id not in self._urgent and now < slot.last_write + self.throttle:
                continue
            self._forget(job_id)
            taken = slot.take()
            if taken is not None:
                slot.last_write = now
                items.append((run, *taken))
        if not items:
            return []
        try:
            refused = self._save(items)
        except QueueError:
            for run, text, waiters in items:
                _slot(run).give_back(text, waiters)
                self._held[run.claimed.job_id] = run
            raise
        except Exception:
            logger.exception("writing checkpoints failed; these values are dropped")
            for _, _, waiters in items:
                resolve(waiters, False)
            return []
        stops = []
        for run, _, waiters in items:
            stored = run.claimed.job_id not in refused
            resolve(waiters, stored)
            if not stored:
                stops.append(Stop(run, LeaseLost, None))
        return stops

    def next_due(self, now: float) -> float:
        """Seconds until a held value is due (for the main loop's wait)."""
        wait = float("inf")
        for job_id, run in self._held.items():
            if job_id in self._urgent:
                return 0.0
            wait = min(wait, max(0.0, _slot(run).last_write + self.throttle - now))
        return wait

    def _forget(self, job_id: str) -> None:
        self._held.pop(job_id, None)
        self._urgent.discard(job_id)

    # -- when attempts end --------------------------------------------------------------------
    def end(self, run: Run, *, keep: bool) -> None:
        """The attempt is over (later values are dropped). ``keep``: its last value goes in
        the final batch, stored before its ack; otherwise (lease lost) it is dropped."""
        slot = run.ctx.end_checkpoints()
        if slot is None:
            return
        taken = slot.take(close=True)
        if taken is None:
            return
        if keep:
            self._final.append((run, *taken))
        else:
            resolve(taken[1], False)

    def flush_final(self) -> None:
        """Store the last values of ended attempts (before their acks go). Raises
        ``QueueError`` when the backend cannot be asked: they stay, and so must the acks."""
        if not self._final:
            return
        items = self._final
        try:
            refused = self._save(items)
        except QueueError:
            raise
        except Exception:  # a bug must not hold every ack back
            logger.exception("storing the last checkpoints failed; these values are dropped")
            refused = frozenset(run.claimed.job_id for run, _, _ in items)
        self._final = []
        for run, _, waiters in items:
            resolve(waiters, run.claimed.job_id not in refused)

    def _save(self, items: list[Taken]) -> frozenset[str]:
        rows = [(run.claimed.job_id, run.claimed.token, text) for run, text, _ in items]
        assert self.backend.resilience is not None
        return self.backend.resilience.call(
            lambda: self.backend.save_checkpoints(rows), idempotent=True
        )


def _slot(run: Run) -> CheckpointSlot:
    slot = run.ctx.checkpoints
    assert slot is not None
    return slot
