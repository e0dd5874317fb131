"""``@job``: registers a handler under a name and gives it ``.enqueue``."""

from __future__ import annotations

import inspect
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, overload

from asgiref.sync import sync_to_async

from django_blamequeue.context import call_directly
from django_blamequeue.core.lifecycle import RetryPredicate
from django_blamequeue.core.records import EnqueuedJob
from django_blamequeue.core.validation import MAX_SECONDS
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs import calls, enqueueing

_lock = threading.Lock()
_registry: dict[str, JobDefinition] = {}


@dataclass(frozen=True, slots=True, kw_only=True)
class JobDefinition:
    """A registered handler. Calling it runs the function directly (no queue)."""

    func: Callable[..., Any]
    name: str
    queue: str
    max_attempts: int | None = None
    timeout: float | None = None
    retryable: RetryPredicate | None = None
    backend: str | None = None
    priority: int = 0
    flow: Any = None  # a flow.FlowSpec for @flow classes
    #: The key of the queue's per-key limits: a string, or a callable of the payload.
    concurrency_key: str | Callable[[Any], str | None] | None = None
    # Retries of this job (None: the settings' BACKOFF_BASE, BACKOFF_MAX, BACKOFF_JITTER),
    # read by the worker when an attempt fails.
    backoff_base: float | None = None
    backoff_max: float | None = None
    jitter: bool | None = None
    #: Run the handler in one transaction with its fenced completion (``worker/atomic.py``).
    atomic: bool = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function here and now, no queue: ``current_job()`` answers a stand-in
        (``context.DirectContext``)."""
        return call_directly(self.func, args, kwargs, name=self.name, queue=self.queue)

    def enqueue(self, payload: Any = None, **options: Any) -> EnqueuedJob:
        """Enqueue a run of this job; options as ``queue.enqueue``, and Celery's
        ``countdown`` (= ``delay``) and ``eta`` (= ``run_at``)."""
        return self.enqueue_many([payload], **options)[0]

    def enqueue_many(self, payloads: list[Any], **options: Any) -> list[EnqueuedJob]:
        options = calls.aliases(options)
        options.setdefault("backend", self.backend)
        options.setdefault("priority", self.priority)
        return enqueueing.enqueue_many(
            self.queue, payloads, definition=self, name=self.name, **options
        )

    def delay(self, *args: Any, **kwargs: Any) -> EnqueuedJob:
        """Celery's ``task.delay(...)``: enqueue a call with these arguments (``calls``)."""
        return calls.apply_async(self, args, kwargs)

    def apply_async(
        self,
        args: Any = None,
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> EnqueuedJob:
        """Celery's ``task.apply_async(args, kwargs, countdown=..., eta=..., ...)``; options
        as ``enqueue``'s."""
        return calls.apply_async(self, args, kwargs, options)

    async def aenqueue(self, payload: Any = None, **options: Any) -> EnqueuedJob:
        """``enqueue`` for async code (an async view): runs it through ``sync_to_async``,
        on the thread of the caller's other database work, so a transaction it opened
        there is joined as ``enqueue`` joins it."""
        return await sync_to_async(self.enqueue)(payload, **options)

    async def aenqueue_many(self, payloads: list[Any], **options: Any) -> list[EnqueuedJob]:
        return await sync_to_async(self.enqueue_many)(payloads, **options)

    @property
    def is_async(self) -> bool:
        """An ``async def`` handler: the worker runs it on its event loop."""
        return self.flow is None and inspect.iscoroutinefunction(self.func)


def _check_backoff(base: object, maximum: object, jitter: object) -> None:
    for value, what in ((base, "backoff_base"), (maximum, "backoff_max")):
        if value is not None and (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not 0 < value <= MAX_SECONDS  # also NaN
        ):
            raise QueueError(
                ErrorCode.INVALID_HANDLER, f"{what} must be seconds > 0 and ≤ {MAX_SECONDS:,}"
            )
    if jitter is not None and not isinstance(jitter, bool):
        raise QueueError(ErrorCode.INVALID_HANDLER, "jitter must be True or False")


def _check_key(concurrency_key: object) -> None:
    if concurrency_key is None or callable(concurrency_key):
        return
    if not isinstance(concurrency_key, str) or not concurrency_key:
        raise QueueError(
            ErrorCode.INVALID_HANDLER,
            "concurrency_key must be a non-empty string or a callable of the payload",
        )


def _check(queue: object, max_attempts: object, timeout: object, retryable: object) -> None:
    if not isinstance(queue, str) or not queue.strip():
        raise QueueError(ErrorCode.MISSING_QUEUE, "@job needs a non-empty queue name")
    if max_attempts is not None and (
        not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1
    ):
        raise QueueError(ErrorCode.INVALID_HANDLER, "max_attempts must be a positive int")
    if timeout is not None and (
        not isinstance(timeout, int | float)
        or isinstance(timeout, bool)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise QueueError(ErrorCode.INVALID_HANDLER, "timeout must be a positive number of seconds")
    if retryable is not None and not callable(retryable):
        raise QueueError(ErrorCode.INVALID_HANDLER, "retryable must be a callable(exc) -> bool")


@overload
def job(func: Callable[..., Any], /) -> JobDefinition: ...
@overload
def job(
    *,
    queue: str = "default",
    name: str | None = None,
    max_attempts: int | None = None,
    timeout: float | None = None,
    retryable: RetryPredicate | None = None,
    backend: str | None = None,
    priority: int = 0,
    concurrency_key: str | Callable[[Any], str | None] | None = None,
    backoff_base: float | None = None,
    backoff_max: float | None = None,
    jitter: bool | None = None,
    atomic: bool = False,
) -> Callable[[Callable[..., Any]], JobDefinition]: ...
def job(
    func: Callable[..., Any] | None = None,
    /,
    *,
    queue: str = "default",
    name: str | None = None,
    max_attempts: int | None = None,
    timeout: float | None = None,
    retryable: RetryPredicate | None = None,
    backend: str | None = None,
    priority: int = 0,
    concurrency_key: str | Callable[[Any], str | None] | None = None,
    backoff_base: float | None = None,
    backoff_max: float | None = None,
    jitter: bool | None = None,
    atomic: bool = False,
) -> Any:
    """Register ``func(payload)`` as a job handler (name defaults to ``module.qualname``).
    ``backoff_base``, ``backoff_max`` and ``jitter`` replace the settings' for this job.
    ``concurrency_key``: the key of the queue's per-key limits for each run, a string or a
    callable of the payload (``enqueue(concurrency_key=...)`` overrides it).

    ``atomic=True``: the handler's database writes commit in one transaction with the job's
    completion, fenced by its lease, so a run that lost its lease commits nothing
    (docs/effects.md).

    An ``async def`` handler runs on the worker's event loop (docs/async.md); it cannot be
    ``atomic`` (a transaction cannot span its awaits).
    """
    _check(queue, max_attempts, timeout, retryable)
    _check_key(concurrency_key)
    _check_backoff(backoff_base, backoff_max, jitter)
    if not isinstance(atomic, bool):
        raise QueueError(ErrorCode.INVALID_HANDLER, "atomic must be True or False")

    def register(f: Callable[..., Any]) -> JobDefinition:
        return register_definition(
            f,
            name=name,
            queue=queue,
            max_attempts=max_attempts,
            timeout=timeout,
            retryable=retryable,
            backend=backend,
            priority=priority,
            concurrency_key=concurrency_key,
            backoff=(backoff_base, backoff_max, jitter),
            atomic=atomic,
        )

    return register(func) if func is not None else register


def register_definition(
    f: Callable[..., Any],
    *,
    name: str | None,
    queue: str,
    max_attempts: int | None,
    timeout: float | None,
    retryable: RetryPredicate | None,
    backend: str | None,
    priority: int,
    flow: Any = None,
    concurrency_key: str | Callable[[Any], str | None] | None = None,
    backoff: tuple[float | None, float | None, bool | None] = (None, None, None),
    atomic: bool = False,
) -> JobDefinition:
    _check(queue, max_attempts, timeout, retryable)
    _check_key(concurrency_key)
    _check_backoff(*backoff)
    if not callable(f):
        raise QueueError(ErrorCode.INVALID_HANDLER, f"{f!r} is not callable")
    if atomic and inspect.iscoroutinefunction(f):
        raise QueueError(
            ErrorCode.INVALID_HANDLER,
            "atomic=True needs a sync handler: its transaction cannot span an async def's awaits",
        )
    definition = JobDefinition(
        func=f,
        name=name or f"{f.__module__}.{f.__qualname__}",
        queue=queue,
        max_attempts=max_attempts,
        timeout=float(timeout) if timeout is not None else None,
        retryable=retryable,
        backend=backend,
        priority=priority,
        flow=flow,
        concurrency_key=concurrency_key,
        backoff_base=float(backoff[0]) if backoff[0] is not None else None,
        backoff_max=float(backoff[1]) if backoff[1] is not None else None,
        jitter=backoff[2],
        atomic=atomic,
    )
    with _lock:
        old = _registry.get(definition.name)
        if old is not None and _origin(old.func) != _origin(f):
            raise QueueError(
                ErrorCode.INVALID_HANDLER,
                f"job name {definition.name!r} is already registered by {_origin(old.func)}",
            )
        _registry[definition.name] = definition
    return definition


def _origin(f: Callable[..., Any]) -> str:
    return f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', repr(f))}"


#: Called with a name nobody registered; may import its module and answer its definition
#: (the django.tasks backend resolves ``@task`` functions by module path this way).
Resolver = Callable[[str], "JobDefinition | None"]
_resolvers: list[Resolver] = []


def add_resolver(resolver: Resolver) -> None:
    with _lock:
        if resolver not in _resolvers:
            _resolvers.append(resolver)


def get(name: str) -> JobDefinition | None:
    found = _registry.get(name)
    if found is None:
        for resolver in list(_resolvers):
            if (found := resolver(name)) is not None:
                break
    return found


def registered() -> dict[str, JobDefinition]:
    with _lock:
        return dict(_registry)


def queues() -> list[str]:
    """Every queue that has a registered job (``runworker``'s default)."""
    return sorted({d.queue for d in registered().values()})


def unregister(name: str) -> None:
    """For tests that register throwaway handlers."""
    with _lock:
        _registry.pop(name, None)
