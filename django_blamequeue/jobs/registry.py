"""``@job``: registers a handler under a name and gives it ``.enqueue``."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, overload

from asgiref.sync import sync_to_async

from django_blamequeue.context import call_directly
from django_blamequeue.core.options import JobOptions, Unset
from django_blamequeue.core.records import EnqueuedJob
from django_blamequeue.core.retry import RetryPredicate
from django_blamequeue.core.unique import Unique
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs import calls, enqueueing, routing, schedules
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
    #: A durable workflow: ``ctx.step`` and friends record and replay (``jobs/workflow.py``).
    durable: bool = False

    @property
    def queue(self) -> str:
        """The queue its jobs go to unless an enqueue names another: its route in
        ``ROUTES``, else its own (``jobs/routing.py``)."""
        queue = self.options.queue
        assert not isinstance(queue, Unset), f"job {self.name} has no queue"
        return routing.route(self.name) or queue

    @property
    def backend(self) -> str | None:
        """The backend its jobs go to unless an enqueue names another (None: the default)."""
        return self.options.backend_alias

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function here and now, no queue: ``current_job()`` answers a stand-in
        (``context.DirectContext``)."""
        return call_directly(self.func, args, kwargs, name=self.name, queue=self.queue)

    def enqueue(self, payload: Any = None, **options: Any) -> EnqueuedJob:
        """Enqueue a run of this job; options as ``queue.enqueue``, ``queue=`` to route this
        call, and Celery's names (``countdown``, ``eta``, ``headers``; ``calls.split``)."""
        return self.enqueue_many([payload], **options)[0]

    def enqueue_many(self, payloads: list[Any], **options: Any) -> list[EnqueuedJob]:
        """Enqueue many runs of this job (all or none); options as ``queue.enqueue_many``'s.
        An option left out is this job's own (``JobOptions.merge``)."""
        given, batch = calls.split(options)
        return enqueueing.enqueue_many(payloads, given, definition=self, name=self.name, **batch)

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
    unique: Unique | bool | Mapping[str, Any] | None = None,
    on_success: Hook | None = None,
    on_retry: Hook | None = None,
    on_failure: Hook | None = None,
    base: type[BaseJob] | None = None,
    max_snoozes: int | None = None,
    durable: bool = False,
    expires: float | timedelta | None = None,
    rate_limit: str | int | tuple[int, float] | None = None,
    schedule: str | float | timedelta | None = None,
    timezone: str = "UTC",
    encrypted: bool | None = None,
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
    unique: Unique | bool | Mapping[str, Any] | None = None,
    on_success: Hook | None = None,
    on_retry: Hook | None = None,
    on_failure: Hook | None = None,
    base: type[BaseJob] | None = None,
    max_snoozes: int | None = None,
    durable: bool = False,
    expires: float | timedelta | None = None,
    rate_limit: str | int | tuple[int, float] | None = None,
    schedule: str | float | timedelta | None = None,
    timezone: str = "UTC",
    encrypted: bool | None = None,
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

    ``durable=True``: a workflow whose ``ctx.step`` results are recorded, so each attempt
    replays to where the last one stopped; it may sleep and wait for events without holding
    a worker (docs/workflows.md). ``@workflow`` says the same.

    An ``async def`` handler runs on the worker's event loop (docs/async.md); it cannot be
    ``atomic`` (a transaction cannot span its awaits) nor ``durable``.

    ``unique``: at most one job per key, by a window, states and a conflict mode
    (docs/unique.md).

    ``on_success``, ``on_retry``, ``on_failure``: callables of a ``JobEvent``, run in the
    process that made the transition, after it committed (docs/hooks.md). ``base``: a
    ``BaseJob`` subclass whose ``__call__`` wraps the function and whose hook methods run
    too; ``@job`` on a ``BaseJob`` subclass registers the class itself (its ``run``).

    ``expires``: seconds after each enqueue past which a run not started yet is cancelled
    (reason ``expired``). ``rate_limit``: ``"10/s"``, ``"10/m"``, ``"10/h"``: at most that
    many starts of this job in any rolling window, across every worker (docs/control.md).
    ``schedule``: a cron expression (in ``timezone``) or an interval in seconds: the job also
    runs periodically, with no arguments (``@periodic`` gives them; docs/schedules.md).
    ``encrypted``: the payload, result and error text are encrypted at rest with
    ``ENCRYPTION_KEYS``; None leaves it to the ``ENCRYPT`` setting (docs/encryption.md).
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
        unique=unique,
        max_snoozes=max_snoozes,
        expires=expires,
        rate_limit=rate_limit,
        encrypted=encrypted,
    ).check_defaults()
    if not isinstance(atomic, bool):
        raise QueueError(ErrorCode.INVALID_HANDLER, "atomic must be True or False")
    if not isinstance(durable, bool):
        raise QueueError(ErrorCode.INVALID_HANDLER, "durable must be True or False")
    given = {
        "on_success": checked_hook(on_success, "on_success"),
        "on_retry": checked_hook(on_retry, "on_retry"),
        "on_failure": checked_hook(on_failure, "on_failure"),
    }

    def register(f: Callable[..., Any]) -> JobDefinition:
        handler = as_handler(f, base)
        definition = register_definition(
            handler,
            name=name,
            options=options,
            atomic=atomic,
            durable=durable,
            hooks=hooks_of(handler, given),
        )
        if schedule is not None:
            try:
                schedules.declare(definition, schedule, timezone=timezone)
            except QueueError:
                unregister(definition.name)  # all or nothing
                raise
        return definition

    return register(func) if func is not None else register


def workflow(func: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """``@workflow`` is ``@job(durable=True)``: the same options (docs/workflows.md)."""
    options["durable"] = True
    return job(func, **options) if func is not None else job(**options)


def register_definition(
    f: Callable[..., Any],
    *,
    name: str | None,
    options: JobOptions,
    flow: Any = None,
    atomic: bool = False,
    hooks: Hooks = NO_HOOKS,
    durable: bool = False,
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
    if durable and (atomic or inspect.iscoroutinefunction(f)):
        raise QueueError(
            ErrorCode.INVALID_HANDLER,
            "durable=True needs a sync handler that is not atomic=True: its steps commit one "
            "by one (use ctx.atomic_step for a step's writes)",
        )
    definition = JobDefinition(
        func=f,
        name=name or f"{f.__module__}.{f.__qualname__}",
        options=options,
        flow=flow,
        atomic=atomic,
        hooks=hooks,
        durable=durable,
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


def rate_limits() -> tuple[tuple[str, int, float], ...]:
    """``(name, max, per_seconds)`` of every registered job with a ``rate_limit``: a worker
    claims under them (``QueueLimits.name_rate_limits``)."""
    found = []
    for name, d in sorted(registered().items()):
        rate = d.options.rate_limit
        if isinstance(rate, tuple):  # checked at registration: (max, per_seconds)
            found.append((name, rate[0], rate[1]))
    return tuple(found)


def queues() -> list[str]:
    """Every queue that has a registered job (``runworker``'s default)."""
    return sorted({d.queue for d in registered().values()})


def unregister(name: str) -> None:
    """For tests that register throwaway handlers (and the schedules they declared)."""
    with _lock:
        _registry.pop(name, None)
    for label, entry in schedules.declared()[1].items():
        if entry["job"] == name:
            schedules.forget(label)


def periodic(
    schedule: str | float | timedelta,
    *,
    timezone: str = "UTC",
    args: list[Any] | tuple[Any, ...] | None = None,
    kwargs: dict[str, Any] | None = None,
    payload: Any = None,
    name: str | None = None,
    queue: str | None = None,
    backend: str | None = None,
    overlap: str = "skip",
    expires: float | None = None,
    enabled: bool = True,
) -> Callable[[Any], JobDefinition]:
    """``@periodic(...)``: run a job on a schedule declared in code, with these arguments.

    Above ``@job`` (or on a plain function, registered with ``@job``'s defaults); stack it
    for several schedules of one job, each with its own ``name``. ``overlap="skip"`` (the
    default) lets an occurrence pass while the last run still waits or runs; ``"allow"``
    fires anyway. Checked at once: a call that cannot bind to the handler's signature is an
    ``INVALID_HANDLER`` here, not a failed run at 3 a.m.
    """

    def declare(target: Any) -> JobDefinition:
        definition = getattr(target, "definition", None)  # a @flow class
        if definition is None:
            definition = target if isinstance(target, JobDefinition) else job(target)
        if not isinstance(definition, JobDefinition):
            raise QueueError(ErrorCode.INVALID_HANDLER, f"@periodic needs a job, not {target!r}")
        schedules.declare(
            definition,
            schedule,
            timezone=timezone,
            name=name,
            args=args,
            kwargs=kwargs,
            payload=payload,
            queue=queue,
            backend=backend,
            overlap=overlap,
            expires=expires,
            enabled=enabled,
        )
        return definition if getattr(target, "definition", None) is None else target

    return declare
