"""Slot threads: where sync handlers run, one run at a time each, handed over without a Condition.

The main thread hands a run straight to one idle thread (that thread's own ``SimpleQueue``, a
C lock: one ``put`` wakes exactly that thread), or starts a thread for it while fewer than
``size`` are counted, or, when every thread is busy, leaves it in a backlog that the next thread
to finish a run takes before it goes idle. A ``threading.Condition`` did the same with a Python
loop in ``notify`` and every waiter woken through it: ≈ 6 µs a job on the main thread
(docs/perf-notes.md, lever 6).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from queue import SimpleQueue

from . import slot_connections, tracing
from .context import _current
from .core import lifecycle
from .exceptions import JobInterrupted
from .runner import Handler, Run, invoke

logger = logging.getLogger("django_blamequeue.worker")


def run_in_slot(run: Run, handler: Handler | None, report: Callable[[Run], None]) -> None:
    """The slot thread's part: run, then report unless the worker already decided."""
    slot_connections.before_job()
    token = _current.set(run.ctx)
    outcome: lifecycle.Outcome | None = None
    try:
        run.guard.enter()
        try:
            if not run.ctx.cancelled:
                call = run.invoker or invoke
                outcome = (
                    tracing.traced_run(run, handler, call)
                    if tracing.enabled
                    else call(run, handler)
                )
        except JobInterrupted:
            outcome = None
        finally:
            run.guard.leave()
    except JobInterrupted:  # landed between the handler's end and leave()
        pass
    finally:
        _current.reset(token)
    slot_connections.after_job(interrupted=outcome is None or run.abandoned)
    with run.lock:
        if run.abandoned or outcome is None:
            return
        run.outcome = outcome
    report(run)


#: What an idle thread's queue receives to exit (``SlotPool.stop``).
_STOP = None


class SlotPool:
    """Up to ``size`` threads running sync runs, each started when a run finds no idle one
    (async runs take slots but no thread, so a worker of async jobs starts none). The thread
    of an abandoned run no longer counts (``replace_one``): it exits when its handler
    returns, and the next run that needs a thread gets a new one."""

    def __init__(self, size: int, handler: Handler | None, report: Callable[[Run], None]) -> None:
        self.size = size
        self.handler = handler
        self.report = report
        self._lock = threading.Lock()  # guards the three below and ``_live``
        self._idle: list[SimpleQueue[Run | None]] = []  # last in, first woken: warm threads
        self._backlog: deque[Run] = deque()  # runs no thread was free for, in order
        self._stopped = False
        self._live = 0  # threads counted against ``size``

    @property
    def live(self) -> int:
        """Threads counted against ``size`` (running a run or idle)."""
        return self._live

    def submit(self, run: Run) -> None:
        self.submit_many([run])

    def submit_many(self, runs: list[Run]) -> None:
        """Each run to an idle thread, else to a new thread while fewer than ``size`` are
        counted, else to the backlog; wakes one thread per run at most."""
        if not runs:
            return
        wake: list[tuple[SimpleQueue[Run | None], Run]] = []
        spawn: list[Run] = []
        with self._lock:
            for run in runs:
                if self._idle:
                    wake.append((self._idle.pop(), run))
                elif self._live < self.size:
                    self._live += 1
                    spawn.append(run)
                else:
                    self._backlog.append(run)
        for inbox, run in wake:
            inbox.put(run)
        for run in spawn:
            threading.Thread(
                target=self._serve, args=(run,), name="blamequeue-slot", daemon=True
            ).start()

    def replace_one(self) -> None:
        """The thread running an abandoned job exits when it returns: stop counting it."""
        with self._lock:
            self._live -= 1

    def stop(self) -> None:
        """Idle threads exit now, busy ones after their run (and what is left queued)."""
        with self._lock:
            self._stopped = True
            idle, self._idle = self._idle, []
        for inbox in idle:
            inbox.put(_STOP)

    def _serve(self, first: Run) -> None:
        inbox: SimpleQueue[Run | None] = SimpleQueue()
        run: Run | None = first
        while run is not None:
            try:
                run_in_slot(run, self.handler, self.report)
            except Exception:  # a slot thread must never die: the worker would lose the slot
                logger.exception("slot thread error after job %s", run.claimed.job_id)
            if run.abandoned:  # no longer counted (replace_one); the next run starts a thread
                break
            run = self._next(inbox)
        slot_connections.drop_all()

    def _next(self, inbox: SimpleQueue[Run | None]) -> Run | None:
        """The next run for this thread, waiting idle for one; None: exit (uncounted)."""
        with self._lock:
            if self._backlog:
                return self._backlog.popleft()
            if self._stopped:
                self._live -= 1
                return None
            self._idle.append(inbox)
        run = inbox.get()
        if run is None:
            with self._lock:
                self._live -= 1
        return run
