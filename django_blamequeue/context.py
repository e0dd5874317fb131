"""``current_job()``: what a running handler may ask of its job (SPEC §3).

The context lives in a contextvar set by the worker around each handler call, so it is right
in threads and in ``asyncio`` code the handler starts.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, cast

from . import validation
from .core import ids
from .exceptions import ErrorCode, QueueError, Retry

if TYPE_CHECKING:
    from .backends.base import Backend

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
    _cancelled: _Flag = field(default_factory=_Flag)
    _last_progress: float = field(default=-1e18)

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
        self._call(lambda: self.backend.set_progress(self.job_id, self.token, value))

    def extend_lease(self, seconds: float) -> bool:
        """Hold the job ``seconds`` more from now; False if the lease was already lost."""
        if not self.backend.supports_extend_lease:
            raise QueueError(
                ErrorCode.EXTEND_LEASE_UNSUPPORTED,
                f"backend {self.backend.alias!r} cannot extend a lease",
            )
        held = validation.seconds(seconds, "extend_lease seconds")
        ok = self._call(lambda: self.backend.extend_lease(self.job_id, self.token, held))
        if ok and self.on_extend is not None:
            self.on_extend(held)
        return ok

    def _call(self, verb: Callable[[], bool]) -> bool:
        return verb() if self.detached is None else self.detached(verb)

    def retry(self, delay: float | None = None, reason: str = "") -> NoReturn:
        """Retry this job ``delay`` seconds from now (None: its backoff), spending this
        attempt: raises ``Retry``, so nothing after the call runs."""
        raise Retry(delay, reason)

    @property
    def direct(self) -> bool:
        """True in a direct call of a ``@job`` function (no worker, no queue, no lease)."""
        return False


class DirectContext(JobContext):
    """``current_job()`` while a ``@job`` function is called directly (``send_welcome(42)``),
    so a handler that reports progress runs unchanged outside a worker. Its ``job_id`` is
    fresh per call; it holds no lease: ``progress`` and ``extend_lease`` check their argument
    and record nothing, ``cancelled`` stays False, ``retry`` raises ``Retry`` to the caller."""

    def progress(self, pct: int) -> None:
        if not isinstance(pct, int | float) or isinstance(pct, bool) or not 0 <= pct <= 100:
            raise QueueError(ErrorCode.BAD_ARGUMENT, f"progress must be 0–100, not {pct!r}")

    def extend_lease(self, seconds: float) -> bool:
        validation.seconds(seconds, "extend_lease seconds")
        return True

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
