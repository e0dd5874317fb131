"""``@job``: registers a handler under a name and gives it ``.enqueue``."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, overload

from asgiref.sync import sync_to_async

from django_blamequeue.context import call_directly
from django_blamequeue.core.options import CALL_OPTIONS, JobOptions, Unset
from django_blamequeue.core.records import EnqueuedJob
from django_blamequeue.core.retry import RetryPredicate
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs import calls, enqueueing
from django_blamequeue.jobs.hooks import (
    NO_HOOKS,
    BaseJob,
    Hook,
    Hooks,
    as_handler,
    checked_hook,
    hooks_of,
)

_lock = threading.Lock()
_registry: dict[str, JobDefinition] = {}


@dataclass(frozen=True, slots=True, kw_only=True)
class JobDefinition:
    """A registered handler. Calling it runs the function directly (no queue)."""

    func: Callable[..., Any]
    name: str
    #: The job's own options (``core/options.py``): its queue and backend, the defaults of
    #: each enqueue (priority, max_attempts, concurrency_key, ...), its timeout and retries.
    options: JobOptions
    flow: Any = None  # a flow.FlowSpec for @flow classes
    #: Run the handler in one transaction with its fenced completion (``worker/atomic.py``).
    atomic: bool = False
    #: ``on_success`` / ``on_retry`` / ``on_failure`` (``jobs/hooks.py``, run by ``events``).
    hooks: Hooks = NO_HOOKS

    @property
    def queue(self) -> str:
        """The queue its jobs go to unless an enqueue names another."""
        queue = self.options.queue
        assert not isinstance(queue, Unset), f"job {self.name} has no queue"
        return queue

    @property
    def backend(self) -> str | None:
        """The backend its jobs go to unless an enqueue names another (None: the default)."""
        return self.options.backend_alias

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function here and now, no queue: ``current_job()`` answers a stand-in
        (``context.DirectContext``)."""
        return call_directly(self.func, args, kwargs, name=self.name, queue=self.queue)

    def enqueue(self, payload: Any = None, **options: Any) -> EnqueuedJob:
        """Enqueue a run of this job; options as ``queue.enqueue``, and Celery's
        ``countdown`` (= ``delay``) and ``eta`` (= ``run_at``)."""
        return self.enqueue_many([payload], **options)[0]

    def enqueue_many(self, payloads: list[Any], **options: Any) -> list[EnqueuedJob]:
        """Enqueue many runs of this job (all or none); options as ``queue.enqueue_many``'s.
        An option left out is this job's own (``JobOptions.merge``)."""
        options = calls.aliases(options)
        given = {k: options.pop(k) for k in CALL_OPTIONS.intersection(options)}
        return enqueueing.enqueue_many(payloads, given, definition=self, name=self.name, **options)

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
    on_success: Hook | None = None,
    on_retry: Hook | None = None,
    on_failure: Hook | None = None,
    base: type[BaseJob] | None = None,
    max_snoozes: int | None = None,
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
    on_success: Hook | None = None,
    on_retry: Hook | None = None,
    on_failure: Hook | None = None,
    base: type[BaseJob] | None = None,
    max_snoozes: int | None = None,
) -> Any:
    """Register ``func(payload)`` as a job handler (name defaults to ``module.qualname``).
    ``backoff_base``, ``backoff_max`` and ``jitter`` replace the settings' for this job.
    ``concurrency_key``: the key of the queue's per-key limits for each run, a string or a
    callable of the payload (``enqueue(concurrency_key=...)`` overrides it).

    ``max_snoozes``: how often a run may raise ``Snooze`` before the job fails
    (``snoozed_too_often``); ``MAX_SNOOZES`` when None.

    ``atomic=True``: the handler's database writes commit in one transaction with the job's
    completion, fenced by its lease, so a run that lost its lease commits nothing
    (docs/effects.md).

    An ``async def`` handler runs on the worker's event loop (docs/async.md); it cannot be
    ``atomic`` (a transaction cannot span its awaits).

    ``on_success``, ``on_retry``, ``on_failure``: callables of a ``JobEvent``, run in the
    process that made the transition, after it committed (docs/hooks.md). ``base``: a
    ``BaseJob`` subclass whose ``__call__`` wraps the function and whose hook methods run
    too; ``@job`` on a ``BaseJob`` subclass registers the class itself (its ``run``).
    """
    options = JobOptions(
        queue=queue,
        backend=backend,
        priority=priority,
        max_attempts=max_attempts,
        timeout=timeout,
        retryable=retryable,
        concurrency_key=concurrency_key,
        backoff_base=backoff_base,
        backoff_max=backoff_max,
        jitter=jitter,
        max_snoozes=max_snoozes,
    ).check_defaults()
    if not isinstance(atomic, bool):
        raise QueueError(ErrorCode.INVALID_HANDLER, "atomic must be True or False")
    given = {
        "on_success": checked_hook(on_success, "on_success"),
        "on_retry": checked_hook(on_retry, "on_retry"),
        "on_failure": checked_hook(on_failure, "on_failure"),
    }

    def register(f: Callable[..., Any]) -> JobDefinition:
        handler = as_handler(f, base)
        return register_definition(
            handler, name=name, options=options, atomic=atomic, hooks=hooks_of(handler, given)
        )

    return register(func) if func is not None else register


def register_definition(
    f: Callable[..., Any],
    *,
    name: str | None,
    options: JobOptions,
    flow: Any = None,
    atomic: bool = False,
    hooks: Hooks = NO_HOOKS,
) -> JobDefinition:
    """Register ``f`` under ``name`` with ``options`` as the job's own (checked here: a
    ``QueueError`` means nothing was registered)."""
    options = options.check_defaults()
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
        options=options,
        flow=flow,
        atomic=atomic,
        hooks=hooks,
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
