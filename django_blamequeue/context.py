"""``current_job()``: what a running handler may ask of its job (docs/concepts.md).

The context lives in a contextvar set by the worker around each handler call, so it is right
in threads and in ``asyncio`` code the handler starts (each async run is a task with its own
copy of the context).

Inside a running event loop (an ``async def`` handler) nothing here may block the loop: Django
refuses its ORM there, and every other job on the loop would wait. ``progress()`` then sends
its write off without waiting, ``checkpoint()`` only hands its value over (it always does),
and the calls that must answer have awaitable twins: ``aprogress``, ``aextend_lease``,
``acheckpoint``. Their writes run through ``sync_to_async``, on the thread Django's async ORM
uses.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, cast

from asgiref.sync import sync_to_async

from django_blamequeue import encryption
from django_blamequeue.core import checkpoints, ids, validation
from django_blamequeue.core.checkpoints import CheckpointSlot
from django_blamequeue.exceptions import ErrorCode, QueueError, Retry

if TYPE_CHECKING:
    from datetime import datetime

    from django_blamequeue.backends.base import Backend
    from django_blamequeue.jobs.registry import JobDefinition
    from django_blamequeue.jobs.workflow import Workflow

logger = logging.getLogger("django_blamequeue.worker")

_SLOT_MADE = threading.Lock()
#: The slot of every attempt that ended without a checkpoint: closed, it drops what a
#: handler still running (abandoned) would put; one for all, as most jobs take none.
_ENDED = CheckpointSlot()
_ENDED.closed = True
_current: ContextVar[JobContext | None] = ContextVar("blamequeue_job", default=None)


class _Flag:
    """``threading.Event``'s ``set``/``is_set`` without its Condition and lock, which cost a
    few microseconds per job: the worker sets it, the handler polls it, nobody waits on it."""

    __slots__ = ("_value",)

    def __init__(self) -> None:
        self._value = False

    def set(self) -> None:
        self._value = True

    def is_set(self) -> bool:
        return self._value


@dataclass(eq=False, kw_only=True)
class JobContext:
    job_id: str
    queue: str
    name: str
    attempt: int
    max_attempts: int
    trace_id: str | None
    backend: Backend
    token: str
    progress_throttle: float = 0.25
    on_extend: Callable[[float], None] | None = None
    #: Runs a backend call outside the handler's own database transaction (an atomic run on
    #: PostgreSQL: a progress write inside it would hold the job's row lock until commit and
    #: block the worker's lease renewals); None: in this thread.
    detached: Callable[[Callable[[], bool]], bool] | None = None
    #: The checkpoint the previous attempt saved, as stored (JSON text), read with the lease.
    previous_checkpoint: str | None = None
    #: The job is stored encrypted: its checkpoints are sealed like its payload.
    encrypted: bool = False
    #: Where ``checkpoint()`` leaves values, made at the first one (most jobs take none).
    checkpoints: CheckpointSlot | None = None
    #: A worker's: its slot tells the main thread (``on_checkpoint(ctx, urgent)``), which
    #: writes the values. None: a context made outside a worker, which writes each at once.
    on_checkpoint: Callable[[JobContext, bool], None] | None = None
    #: An ``@job(atomic=True)`` run: its writes roll back with a failed attempt, so it takes
    #: no checkpoint (the next attempt would skip work that was undone).
    atomic: bool = False
    #: A durable job's replay (``jobs/workflow.py``): what ``step``, ``sleep``,
    #: ``wait_for_event`` and ``child`` answer from. None: not a durable job.
    workflow: Workflow | None = None
    #: The time the run sees (a test's moved clock); None: the engine's clock.
    clock: Callable[[], datetime] | None = None
    _cancelled: _Flag = field(default_factory=_Flag)
    _last_progress: float = field(default=-1e18)
    _writes: set[asyncio.Task[Any]] | None = None  # made at the first async progress write

    @property
    def cancelled(self) -> bool:
        """True once the job was cancelled, timed out, lost its lease or the worker stops."""
        return self._cancelled.is_set()

    def progress(self, pct: int) -> None:
        """Record progress 0–100; at most one write per throttle period (0 and 100 always)."""
        if not isinstance(pct, int | float) or isinstance(pct, bool) or not 0 <= pct <= 100:
            raise QueueError(ErrorCode.BAD_ARGUMENT, f"progress must be 0–100, not {pct!r}")
        value = int(pct)
        now = time.monotonic()
        if value not in (0, 100) and now - self._last_progress < self.progress_throttle:
            return
        self._last_progress = now
        if _in_event_loop():  # an async handler: write without blocking the loop, in order
            write = asyncio.ensure_future(self._store_progress(value))
            if self._writes is None:
                self._writes = set()
            self._writes.add(write)
            write.add_done_callback(self._written)
            return
        self._call(lambda: self.backend.set_progress(self.job_id, self.token, value))

    async def aprogress(self, pct: int) -> None:
        """``progress`` for async handlers, returning once the value is written."""
        self.progress(pct)
        if self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    async def _store_progress(self, value: int) -> None:
        verb = lambda: self.backend.set_progress(self.job_id, self.token, value)  # noqa: E731
        await sync_to_async(self._call)(verb)

    def _written(self, task: asyncio.Task[Any]) -> None:
        if self._writes is not None:
            self._writes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("recording progress of job %s failed: %s", self.job_id, task.exception())

    def extend_lease(self, seconds: float) -> bool:
        """Hold the job ``seconds`` more from now; False if the lease was already lost."""
        held = self._extension(seconds)
        if _in_event_loop():
            raise QueueError(
                ErrorCode.INVALID_HANDLER,
                "ctx.extend_lease() would block the event loop: in an async handler, "
                "use await ctx.aextend_lease(seconds)",
            )
        ok = self._call(lambda: self.backend.extend_lease(self.job_id, self.token, held))
        return self._extended(ok, held)

    async def aextend_lease(self, seconds: float) -> bool:
        """``extend_lease`` for async handlers."""
        held = self._extension(seconds)
        verb = lambda: self.backend.extend_lease(self.job_id, self.token, held)  # noqa: E731
        return self._extended(await sync_to_async(self._call)(verb), held)

    def _extension(self, seconds: float) -> float:
        if not self.backend.supports_extend_lease:
            raise QueueError(
                ErrorCode.EXTEND_LEASE_UNSUPPORTED,
                f"backend {self.backend.alias!r} cannot extend a lease",
            )
        return validation.seconds(seconds, "extend_lease seconds")

    def _extended(self, ok: bool, held: float) -> bool:
        if ok and self.on_extend is not None:
            self.on_extend(held)
        return ok

    # -- checkpoints -----------------------------------------------------------------------
    @property
    def last_checkpoint(self) -> Any:
        """The value the previous attempt saved with ``checkpoint`` (None at first): where a
        long job resumes. It stays that attempt's value while this one saves its own."""
        return encryption.open_checkpoint(self.previous_checkpoint)

    def checkpoint(self, value: Any, *, wait: bool = False) -> None:
        """Save ``value`` (JSON, at most 64 KiB) as where the job stands, for the attempt
        that runs it next if this one does not finish (killed, timed out, released, failed).

        Without ``wait`` it does not block: the worker stores the latest value at most once
        per ``PROGRESS_THROTTLE`` and always the last one when the attempt ends, before its
        ack. A kill -9 can lose the values of the last throttle period. ``wait=True`` returns
        once ``value`` is stored (one round trip): use it when a step must never be redone
        after its checkpoint. Raises ``QueueError``: ``BAD_CHECKPOINT`` (not JSON),
        ``CHECKPOINT_TOO_LARGE``, or ``LOCK_LOST`` (waited, and the lease is gone).
        """
        text = self._checkpointable(value)
        if wait and _in_event_loop():
            raise QueueError(
                ErrorCode.INVALID_HANDLER,
                "ctx.checkpoint(value, wait=True) would block the event loop: in an async "
                "handler, use await ctx.acheckpoint(value)",
            )
        slot = self._slot()
        if slot.writer is not None and not _in_event_loop():
            wait = True  # nobody else writes for this context: write now
        waiter = slot.put(text, wait=wait)
        if waiter is not None and not waiter.result():
            raise self._lock_lost()

    async def acheckpoint(self, value: Any) -> None:
        """``checkpoint(value, wait=True)`` for async handlers: returns once it is stored."""
        text = self._checkpointable(value)
        slot = self._slot()
        if slot.writer is not None:  # no worker thread writes for us: write it ourselves
            ok = await sync_to_async(lambda: slot.put(text, wait=True).result())()  # type: ignore[union-attr]
        else:
            waiter = slot.put(text, wait=True)
            assert waiter is not None
            ok = await asyncio.wrap_future(waiter)
        if not ok:
            raise self._lock_lost()

    def _checkpointable(self, value: Any) -> str:
        if self.atomic:
            raise QueueError(
                ErrorCode.INVALID_HANDLER,
                "an atomic job takes no checkpoint: a failed attempt rolls its writes back, "
                "and the next attempt would skip them",
            )
        return encryption.seal_checkpoint(value, self.encrypted)

    def _slot(self) -> CheckpointSlot:
        if self.checkpoints is not None:
            return self.checkpoints
        with _SLOT_MADE:  # a handler's own threads may take the first checkpoint together
            if self.checkpoints is None:
                tell = self.on_checkpoint
                if tell is not None:
                    self.checkpoints = CheckpointSlot(notify=lambda _, urgent: tell(self, urgent))
                else:
                    self.checkpoints = CheckpointSlot(writer=self._store_checkpoint)
            return self.checkpoints

    def end_checkpoints(self) -> CheckpointSlot | None:
        """The attempt is over: its slot, or None if it took no checkpoint, in which case a
        closed slot now drops what a handler still running (abandoned) would put."""
        with _SLOT_MADE:
            if self.checkpoints is not None:
                return self.checkpoints
            self.checkpoints = _ENDED  # shared: a closed slot holds nothing and never opens
            return None

    def _store_checkpoint(self, text: str) -> bool:
        def store() -> bool:
            refused = self.backend.save_checkpoints([(self.job_id, self.token, text)])
            return self.job_id not in refused

        return self._call(store)

    def _lock_lost(self) -> QueueError:
        return QueueError(
            ErrorCode.LOCK_LOST,
            f"job {self.job_id}: the checkpoint was not stored, this attempt no longer holds "
            "the lease",
        )

    def _call(self, verb: Callable[[], bool]) -> bool:
        return verb() if self.detached is None else self.detached(verb)

    def retry(self, delay: float | None = None, reason: str = "") -> NoReturn:
        """Retry this job ``delay`` seconds from now (None: its backoff), spending this
        attempt: raises ``Retry``, so nothing after the call runs."""
        raise Retry(delay, reason)

    # -- durable workflows (docs/workflows.md) -------------------------------------------
    def now(self) -> datetime:
        """The time by the job's engine (or the test's moved clock)."""
        return self.clock() if self.clock is not None else self.backend.now()

    def _workflow(self, verb: str) -> Workflow:
        if self.workflow is None:
            raise QueueError(
                ErrorCode.INVALID_HANDLER,
                f"ctx.{verb}() needs a durable job: register it with @job(durable=True) or "
                "@workflow (docs/workflows.md)",
            )
        return self.workflow

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` run once for this job: its JSON result is recorded under
        ``name`` (and its occurrence), and every later attempt answers it without running
        ``fn``. A step that raises is not recorded: the attempt fails as usual and the next
        one runs it again."""
        return self._workflow("step").step(name, fn, args, kwargs, atomic=False)

    def atomic_step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``step``, with ``fn``'s database writes committed in one transaction with the
        step's record, fenced by the lease: both or neither, once."""
        return self._workflow("atomic_step").step(name, fn, args, kwargs, atomic=True)

    def version(self, name: str, latest: int) -> int:
        """A marker for changed workflow code: ``latest`` (recorded) for a run that gets here
        for the first time, 0 for one that recorded another step here on older code. Branch
        on it to keep old runs on their old path (docs/workflows.md#changing-workflow-code)."""
        return self._workflow("version").version(name, latest)

    def sleep(self, seconds: float, *, name: str = "sleep") -> None:
        """A durable timer: the attempt ends here without being spent or holding a slot, and
        the job replays to this point ``seconds`` from the first time it got here."""
        self._workflow("sleep").sleep(seconds, name)

    def sleep_until(self, when: datetime, *, name: str = "sleep") -> None:
        """``sleep`` until ``when`` (timezone-aware)."""
        self._workflow("sleep_until").sleep_until(when, name)

    def wait_for_event(self, name: str, *, key: str = "", timeout: float | None = None) -> Any:
        """The payload of event ``name``/``key`` sent with ``queue.send_event`` (one sent
        before this wait counts, if it is still kept). The job parks until it comes; past
        ``timeout`` seconds (from the first time it got here) raises ``WaitTimeout``."""
        return self._workflow("wait_for_event").wait_for_event(name, key, timeout)

    def child(self, name: str, job: JobDefinition, payload: Any = None, **options: Any) -> Any:
        """Enqueue ``job`` (a ``@job`` or ``@workflow``) as this step's child and answer its
        result once it is done; a child that fails or is cancelled raises ``ChildFailed``.
        ``options`` as ``job.enqueue``'s."""
        return self._workflow("child").child(name, job, payload, dict(options))

    @property
    def direct(self) -> bool:
        """True in a direct call of a ``@job`` function (no worker, no queue, no lease)."""
        return False


class DirectContext(JobContext):
    """``current_job()`` while a ``@job`` function is called directly (``send_welcome(42)``),
    so a handler that reports progress runs unchanged outside a worker. Its ``job_id`` is
    fresh per call; it holds no lease: ``progress``, ``extend_lease`` and ``checkpoint`` (and
    their async twins) check their argument and record nothing, ``last_checkpoint`` is None,
    ``cancelled`` stays False, ``retry`` raises ``Retry`` to the caller."""

    def progress(self, pct: int) -> None:
        if not isinstance(pct, int | float) or isinstance(pct, bool) or not 0 <= pct <= 100:
            raise QueueError(ErrorCode.BAD_ARGUMENT, f"progress must be 0–100, not {pct!r}")

    def extend_lease(self, seconds: float) -> bool:
        validation.seconds(seconds, "extend_lease seconds")
        return True

    async def aextend_lease(self, seconds: float) -> bool:
        return self.extend_lease(seconds)

    async def aprogress(self, pct: int) -> None:
        self.progress(pct)

    def checkpoint(self, value: Any, *, wait: bool = False) -> None:
        checkpoints.encode(value)  # refused as in a worker; nothing is stored

    async def acheckpoint(self, value: Any) -> None:
        checkpoints.encode(value)

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)  # a direct call records nothing: every step runs

    def atomic_step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    def version(self, name: str, latest: int) -> int:
        return latest  # a direct call has no older record

    def sleep(self, seconds: float, *, name: str = "sleep") -> None:
        validation.delay(seconds)  # checked as in a worker; a direct call does not wait

    def sleep_until(self, when: datetime, *, name: str = "sleep") -> None:
        validation.run_at(when)

    def wait_for_event(self, name: str, *, key: str = "", timeout: float | None = None) -> Any:
        raise QueueError(
            ErrorCode.INVALID_HANDLER,
            "ctx.wait_for_event() in a direct call: no event can reach it; enqueue the job",
        )

    def child(self, name: str, job: JobDefinition, payload: Any = None, **options: Any) -> Any:
        return job(payload)

    @property
    def direct(self) -> bool:
        return True


def call_directly(
    func: Callable[..., Any], args: Any, kwargs: Any, *, name: str, queue: str
) -> Any:
    """``func(*args, **kwargs)`` with a ``DirectContext`` as ``current_job()`` (an ``async``
    function's context is current while its coroutine runs)."""
    ctx = DirectContext(
        job_id=ids.new_id(),
        queue=queue,
        name=name,
        attempt=1,
        max_attempts=1,
        trace_id=None,
        backend=cast("Backend", None),  # never used: the methods that would are overridden
        token="",
    )
    token = _current.set(ctx)
    try:
        result = func(*args, **kwargs)
    finally:
        _current.reset(token)
    if inspect.iscoroutine(result):
        return _in_context(result, ctx)
    return result


async def _in_context(coro: Coroutine[Any, Any, Any], ctx: JobContext) -> Any:
    token = _current.set(ctx)
    try:
        return await coro
    finally:
        _current.reset(token)


def _in_event_loop() -> bool:
    """Whether this thread is running an event loop (where blocking calls stall every task)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def current_job() -> JobContext:
    """The running job's context; only valid inside a handler."""
    ctx = _current.get()
    if ctx is None:
        raise QueueError(ErrorCode.INVALID_HANDLER, "current_job() called outside a running job")
    return ctx


def current_job_or_none() -> JobContext | None:
    return _current.get()


class JobContextFilter(logging.Filter):
    """Puts ``job_id``, ``queue`` and ``attempt`` on every record (``-`` outside a job)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _current.get()
        for attr, value in (
            ("job_id", ctx.job_id if ctx else "-"),
            ("queue", ctx.queue if ctx else "-"),
            ("attempt", ctx.attempt if ctx else "-"),
        ):
            if not hasattr(record, attr):
                setattr(record, attr, value)
        return True
