"""``async def`` handlers: a consumer's one event loop, on a thread of its own.

The worker's main thread claims, renews, times out and acks async runs exactly as it does
threaded ones (they sit in the same ``_running`` map and take the same slots); only the
running differs. Each async run is a task on this loop, created with a copy of the context in
which ``current_job()`` is the run's, so the contextvar is right in the handler and in
everything it starts, ``sync_to_async`` calls included. The worker stops a run (timeout,
cancel, lost lease, the end of the shutdown grace) by cancelling its task from its own
thread (``TaskGuard``), where a threaded run gets an exception raised in its thread
(``interrupt.Guard``): the handler sees ``asyncio.CancelledError`` at its next ``await``.

Django's async ORM runs each query through ``sync_to_async`` on asgiref's one
thread-sensitive thread, so every async run of a worker shares that thread and its database
connection. After each run the loop has that thread drop a connection that is broken, or, once
no async run is left, one past ``CONN_MAX_AGE`` — what a slot thread does after each job.

The loop thread starts with the first async run, so a worker of sync jobs has none.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import threading
import time
from collections.abc import Callable, Sequence

from asgiref.sync import sync_to_async
from django.db import connections

from django_blamequeue.context import _current
from django_blamequeue.core import lifecycle
from django_blamequeue.exceptions import JobInterrupted
from django_blamequeue.observability import tracing
from django_blamequeue.worker.execution import Handler, Run, prepare, succeeded
from django_blamequeue.worker.interrupt import Guard
from django_blamequeue.worker.notify import asend_started

logger = logging.getLogger("django_blamequeue.worker")

#: How long a stopping loop waits for tasks that ignore their cancellation.
STOP_WAIT = 1.0


class TaskGuard(Guard):
    """Stops an async run by cancelling its task on the loop (from any thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop = loop
        self.task: asyncio.Task[None] | None = None

    def interrupt(self, exc_type: type[JobInterrupted]) -> bool:
        try:
            self.loop.call_soon_threadsafe(self._cancel, exc_type.reason)
        except RuntimeError:  # the loop is closed: nothing runs there any more
            return False
        return True

    def _cancel(self, reason: str) -> None:
        # Before the task exists, the starter sees ``run.abandoned`` and never creates it.
        if self.task is not None and not self.task.done():
            self.task.cancel(reason)


async def ainvoke(run: Run, handler: Handler | None) -> lifecycle.Outcome:
    """``runner.invoke`` for the loop: every way the handler ends becomes an outcome, except
    the worker's own cancellation, which propagates."""
    call = prepare(run, handler)
    if not callable(call):
        return call
    await asend_started(run)
    try:
        result = call()
        if inspect.isawaitable(result):
            result = await result
    except asyncio.CancelledError as exc:
        if run.abandoned:
            raise
        return lifecycle.Raised(exc, lifecycle.format_traceback(exc))  # the handler's own
    except BaseException as exc:  # SystemExit in a task would stop the loop itself
        return lifecycle.Raised(exc, lifecycle.format_traceback(exc))
    return succeeded(result)


class EventLoop:
    """A consumer's event loop thread; ``submit_many`` starts async runs on it."""

    def __init__(self, handler: Handler | None, report: Callable[[Run], None]) -> None:
        self.handler = handler
        self.report = report
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def submit_many(self, runs: Sequence[Run]) -> None:
        if not runs:
            return
        loop = self._started()
        for run in runs:
            run.guard = TaskGuard(loop)
        loop.call_soon_threadsafe(self._start_all, list(runs))

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                self._thread = threading.Thread(
                    target=self._serve, args=(loop, ready), name="blamequeue-loop", daemon=True
                )
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def _serve(self, loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
            left = [t for t in self._tasks if not t.done()]
            for task in left:
                task.cancel("shutdown")
            if left:  # runs the worker released: let them unwind, however briefly
                loop.run_until_complete(asyncio.wait(left, timeout=STOP_WAIT))
            loop.run_until_complete(loop.shutdown_asyncgens())
        except Exception:
            logger.exception("the event loop of async jobs failed")
        finally:
            loop.close()

    def _start_all(self, runs: list[Run]) -> None:
        assert self._loop is not None
        for run in runs:
            if run.abandoned:  # stopped before it started
                continue
            context = contextvars.copy_context()
            context.run(_current.set, run.ctx)
            task = self._loop.create_task(self._execute(run), context=context)
            assert isinstance(run.guard, TaskGuard)
            run.guard.task = task
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _execute(self, run: Run) -> None:
        began = time.monotonic()
        outcome: lifecycle.Outcome | None = None
        try:
            if not run.ctx.cancelled:
                outcome = await (
                    tracing.atraced_run(run, self.handler, ainvoke)
                    if tracing.enabled
                    else ainvoke(run, self.handler)
                )
        except asyncio.CancelledError:
            outcome = None  # the worker stopped it and decided its ack
        except Exception:
            logger.exception("async run of job %s failed outside its handler", run.claimed.job_id)
            outcome = None
        await self._tidy_connections()
        with run.lock:
            if run.abandoned or outcome is None:
                return
            run.outcome = outcome
            run.took = time.monotonic() - began
        self.report(run)

    async def _tidy_connections(self) -> None:
        idle = len(self._tasks) <= 1  # this run is the last one on the loop
        try:
            await sync_to_async(_tidy, thread_sensitive=True)(idle)
        except asyncio.CancelledError:
            pass  # the loop is stopping
        except Exception:
            logger.debug("tidying the async ORM's connections failed", exc_info=True)

    def stop(self, timeout: float = STOP_WAIT + 1) -> None:
        """Cancel what is left and stop the loop (the worker released those runs already)."""
        with self._lock:
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:
            return  # closed already
        thread.join(timeout)


def _tidy(idle: bool) -> None:
    """On the async ORM's thread: close a connection that failed; when no async run is left,
    also one past ``CONN_MAX_AGE`` (``close_old_connections``' rule)."""
    for connection in connections.all(initialized_only=True):
        if idle or connection.errors_occurred:
            connection.close_if_unusable_or_obsolete()
