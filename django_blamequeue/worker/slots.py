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
import time
from collections import deque
from collections.abc import Callable
from queue import SimpleQueue

from django_blamequeue.context import _current
from django_blamequeue.core import lifecycle
from django_blamequeue.exceptions import JobInterrupted
from django_blamequeue.observability import tracing
from django_blamequeue.worker import slot_db
from django_blamequeue.worker.execution import Handler, Run, invoke

logger = logging.getLogger("django_blamequeue.worker")


def run_in_slot(run: Run, handler: Handler | None, report: Callable[[Run], None]) -> None:
    """The slot thread's part: run, then report unless the worker already decided."""
    began = time.monotonic()
    slot_db.before_job()
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
    slot_db.after_job(interrupted=outcome is None or run.abandoned)
    with run.lock:
        if run.abandoned or outcome is None:
            return
        run.outcome = outcome
        run.took = time.monotonic() - began
    report(run)


class SlotPool:
    """Up to ``size`` threads running sync runs, each started when a run finds no idle one
    (async runs take slots but no thread, so a worker of async jobs starts none). The thread
    of an abandoned run no longer counts (``replace_one``): it exits when its handler
    returns, and the next run that needs a thread gets a new one.

    Runs wait in one queue; a thread that finishes a run takes the next before it parks. A
    parked thread waits on its own ``SimpleQueue`` (a C lock: no Python loop, no lock
    allocated per wait) and is woken in a chain, one by the one before, while runs are left."""

    def __init__(self, size: int, handler: Handler | None, report: Callable[[Run], None]) -> None:
        self.size = size
        self.handler = handler
        self.report = report
        self._lock = threading.Lock()  # guards the four below
        self._work: deque[Run] = deque()
        self._parked: list[SimpleQueue[bool]] = []  # last parked, first woken: warm threads
        self._stopped = False
        self._live = 0  # threads counted against ``size``
        #: Threads started and not exited yet, with the run each is on (None: parked).
        self._threads: dict[threading.Thread, Run | None] = {}

    @property
    def live(self) -> int:
        """Threads counted against ``size`` (running a run or parked)."""
        return self._live

    def submit(self, run: Run) -> None:
        self.submit_many([run])

    def submit_many(self, runs: list[Run]) -> None:
        """Queue ``runs``, start the threads they lack while fewer than ``size`` are counted,
        and wake one parked thread: it wakes the next if runs are still queued when it takes
        its own (so a batch costs this thread one wake-up, and threads that a busy one beats
        to the runs are never woken for nothing)."""
        if not runs:
            return
        with self._lock:
            self._work.extend(runs)
            spawn = min(len(self._work) - len(self._parked), self.size - self._live)
            if spawn > 0:
                self._live += spawn
            woken = self._parked.pop() if self._parked else None
        if woken is not None:
            woken.put(True)
        for _ in range(spawn):
            thread = threading.Thread(target=self._serve, name="blamequeue-slot", daemon=True)
            with self._lock:
                self._threads[thread] = None
            thread.start()

    def replace_one(self) -> None:
        """The thread running an abandoned job exits when it returns: stop counting it."""
        with self._lock:
            self._live -= 1

    def stop(self, wait: float = 0.0) -> None:
        """Parked threads exit now, busy ones once no run is left queued. With ``wait``, wait
        up to that many seconds for them to be gone, their connections closed (not for the
        threads of abandoned runs: their handlers may not return soon)."""
        with self._lock:
            self._stopped = True
            parked, self._parked = self._parked, []
            threads = [t for t, run in self._threads.items() if run is None or not run.abandoned]
        for inbox in parked:
            inbox.put(False)
        deadline = time.monotonic() + wait
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _serve(self) -> None:
        inbox: SimpleQueue[bool] = SimpleQueue()
        fresh = True  # just started
        me = threading.current_thread()
        while (run := self._next(inbox, fresh)) is not None:
            fresh = False
            self._threads[me] = run
            try:
                run_in_slot(run, self.handler, self.report)
            except Exception:  # a slot thread must never die: the worker would lose the slot
                logger.exception("slot thread error after job %s", run.claimed.job_id)
            self._threads[me] = None
            if run.abandoned:  # no longer counted (replace_one); the next run starts a thread
                break
        slot_db.drop_all()
        with self._lock:
            self._threads.pop(me, None)

    def _next(self, inbox: SimpleQueue[bool], fresh: bool) -> Run | None:
        """The next queued run, parked until there is one; None: exit (no longer counted).

        A thread just started or woken that takes a run with more queued behind it wakes one
        parked thread for those (the chain); a thread back from a run does not: it takes the
        next run itself, and short runs cost no wake-ups at all."""
        while True:
            woken = None
            with self._lock:
                if self._work:
                    run = self._work.popleft()
                    if fresh and self._work and self._parked:
                        woken = self._parked.pop()
                elif self._stopped:
                    self._live -= 1
                    return None
                else:
                    self._parked.append(inbox)
                    run = None
            if run is not None:
                if woken is not None:
                    woken.put(True)
                return run
            if not inbox.get():  # False: stopped
                with self._lock:
                    self._live -= 1
                return None
            fresh = True
