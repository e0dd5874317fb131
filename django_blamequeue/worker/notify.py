"""The lifecycle signals of a worker's attempts, and the jobs' hooks, off the main loop.

``job_started`` goes out in the slot thread (or on the event loop) just before the handler is
called. The others wait for the attempt's ack: once the engine answered that the job reached
``done``, ``pending`` for a retry, ``failed`` or ``cancelled`` (the ack committed), the run is
handed to one notifier thread per worker, which runs the hooks and sends the signal there:
a slow hook never delays a claim, a heartbeat or another job's ack, and a raising one is
logged (``jobs/events.py``). An ack the engine refused (a stale lease) notifies nothing.

A kill -9 between the commit and the notification skips it; a graceful stop waits for the
queued ones up to the shutdown grace.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections

from django_blamequeue import encryption
from django_blamequeue.core import lifecycle
from django_blamequeue.core.records import AckResult, Transition
from django_blamequeue.core.states import State
from django_blamequeue.jobs import events
from django_blamequeue.jobs.events import JobEvent

if TYPE_CHECKING:  # execution calls send_started: only the type here
    from django_blamequeue.worker.execution import Run

logger = logging.getLogger("django_blamequeue.hooks")

_KIND = {
    State.DONE: events.SUCCEEDED,
    State.FAILED: events.FAILED,
    State.CANCELLED: events.CANCELLED,
}


def kind_of(transition: Transition, state: State | None) -> str | None:
    """The lifecycle signal of an applied ack: where the engine says the job went."""
    if state == State.PENDING:
        return None if transition.give_back_attempt else events.RETRYING
    return _KIND.get(state) if state is not None else None


def event_of(run: Run, state: str, transition: Transition | None = None) -> JobEvent:
    """The event of ``run`` that went to ``state`` (with ``transition``'s error, if any)."""
    c = run.claimed
    outcome = run.outcome
    t = transition
    return JobEvent(
        job_id=c.job_id,
        name=c.name,
        queue=c.queue,
        backend=run.ctx.backend.alias,
        state=state,
        attempt=c.attempt,
        max_attempts=c.max_attempts,
        reason=t.reason.value if t is not None and t.reason else None,
        error=encryption.readable(t.error) if t is not None else None,
        error_type=t.error_type if t is not None else None,
        traceback=encryption.readable(t.traceback) if t is not None else None,
        exc=outcome.exc if isinstance(outcome, lifecycle.Raised) else None,
        retry_in=t.delay if t is not None and state == State.PENDING else None,
        trace_id=c.trace_id,
        encoded_payload=c.payload,
        encoded_result=outcome.result if isinstance(outcome, lifecycle.Succeeded) else None,
    )


def send_started(run: Run) -> None:
    """``job_started``, in the thread about to call the handler (receivers may set up
    whatever the handler's thread needs); a raising receiver is logged, the run goes on."""
    if events.SIGNALS[events.STARTED].receivers:
        events.notify(events.STARTED, event_of(run, State.INFLIGHT.value), run.definition)


async def asend_started(run: Run) -> None:
    """``send_started`` for a run on the event loop: receivers are sync code, run where
    Django's async ORM runs its queries."""
    if events.SIGNALS[events.STARTED].receivers:
        await sync_to_async(send_started, thread_sensitive=True)(run)


def notify_now(run: Run, transition: Transition, res: AckResult) -> None:
    """What ``Notifier.ended`` queues, run in this thread (``testing.run_jobs``)."""
    kind = kind_of(transition, res.state) if res.ok else None
    if kind is not None and events.wanted(kind, run.definition):
        assert res.state is not None
        events.notify(kind, event_of(run, res.state.value, transition), run.definition)


class Notifier:
    """One thread per worker that runs hooks and sends lifecycle signals, in ack order."""

    def __init__(self) -> None:
        self._queue: deque[tuple[str, JobEvent, Run]] = deque()
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def ended(self, run: Run, transition: Transition, res: AckResult) -> None:
        """An ack the engine applied: queue its notification, if anybody listens."""
        if not res.ok:
            return
        kind = kind_of(transition, res.state)
        if kind is None or not events.wanted(kind, run.definition):
            return
        assert res.state is not None
        event = event_of(run, res.state.value, transition)
        with self._ready:
            self._queue.append((kind, event, run))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="blamequeue-hooks", daemon=True
                )
                self._thread.start()
            self._ready.notify()

    @property
    def backlog(self) -> int:
        return len(self._queue)

    def stop(self, deadline: float) -> None:
        """Run what is queued until ``deadline`` (monotonic), then stop; what is left is
        skipped, and said."""
        with self._ready:
            self._stopping = True
            self._ready.notify()
            thread = self._thread
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
        left = len(self._queue)
        if left:
            logger.warning(
                "%d hook/signal notification(s) of acked jobs skipped: the worker stopped "
                "before they ran (their jobs' states are committed)",
                left,
            )

    def _serve(self) -> None:
        try:
            while True:
                with self._ready:
                    while not self._queue and not self._stopping:
                        self._ready.wait()
                    if not self._queue:
                        return
                    kind, event, run = self._queue.popleft()
                try:
                    events.notify(kind, event, run.definition)
                except BaseException:  # notify never raises; a hook's BaseException might
                    logger.exception("notifying %s of job %s failed", kind, event.job_id)
                if not self._queue:
                    close_old_connections()  # a hook's broken or aged connection
        finally:
            connections.close_all()
