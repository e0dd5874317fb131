"""A job's hooks (``on_success``, ``on_retry``, ``on_failure``) and class-based jobs.

A hook is a callable of one ``JobEvent`` (``jobs/events.py``). A job gets hooks two ways,
and both run: the methods a ``BaseJob`` subclass overrides — the way a project wraps all its
jobs once, like a Celery base class — then the callables given to ``@job(on_failure=...)``.
Where and when they run is ``jobs/events.py``'s to say (docs/hooks.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django_blamequeue.exceptions import ErrorCode, QueueError

if TYPE_CHECKING:
    from django_blamequeue.jobs.events import JobEvent

Hook = Callable[["JobEvent"], Any]
#: The hooks a job may have, by the lifecycle signal that runs them.
HOOK_NAMES = ("on_success", "on_retry", "on_failure")


class BaseJob:
    """A job written as a class, as a Celery ``Task`` subclass is: ``run`` is the handler,
    ``on_success`` / ``on_retry`` / ``on_failure`` its hooks (each takes a ``JobEvent``).

    Register a subclass with ``@job(queue=...)``, or give a project's base class to every
    function job with ``@job(base=ProjectJob)``: its ``run`` is then the function. Override
    ``__call__`` to wrap every run of those jobs (call ``super().__call__(*args, **kwargs)``
    inside); it runs in the worker's slot thread, around the handler, on every attempt. One
    instance serves every run of the job, as in Celery: keep no per-run state on ``self``.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(*args, **kwargs)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__qualname__} must define run()")

    def on_success(self, event: JobEvent) -> None:
        """The job ended ``done``; ``event.result`` is what ``run`` returned."""

    def on_retry(self, event: JobEvent) -> None:
        """An attempt failed and the job will run again (``event.retry_in`` seconds)."""

    def on_failure(self, event: JobEvent) -> None:
        """The job ended ``failed`` (in the dead-letter queue), once per trip there."""


@dataclass(frozen=True, slots=True)
class Hooks:
    """A job's hooks by kind, in the order they run."""

    on_success: tuple[Hook, ...] = ()
    on_retry: tuple[Hook, ...] = ()
    on_failure: tuple[Hook, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.on_success or self.on_retry or self.on_failure)

    def of(self, kind: str) -> tuple[Hook, ...]:
        """The hooks of ``kind`` (``on_success``, ``on_retry``, ``on_failure``)."""
        found: tuple[Hook, ...] = getattr(self, kind, ())
        return found


NO_HOOKS = Hooks()


def checked_hook(value: object, name: str) -> Hook | None:
    """A hook given to ``@job``: None or a callable (``INVALID_HANDLER`` otherwise)."""
    if value is not None and not callable(value):
        raise QueueError(
            ErrorCode.INVALID_HANDLER, f"{name} must be a callable(event), not {value!r}"
        )
    return value


def hooks_of(handler: object, given: dict[str, Hook | None]) -> Hooks:
    """The hooks of a handler: a ``BaseJob``'s overridden methods, then those ``given``."""
    found: dict[str, tuple[Hook, ...]] = {}
    for kind in HOOK_NAMES:
        hooks: list[Hook] = []
        if isinstance(handler, BaseJob) and getattr(type(handler), kind) is not getattr(
            BaseJob, kind
        ):
            hooks.append(getattr(handler, kind))
        if given.get(kind) is not None:
            hooks.append(given[kind])  # type: ignore[arg-type]
        found[kind] = tuple(hooks)
    return Hooks(**found) if any(found.values()) else NO_HOOKS


def as_handler(target: Any, base: type[BaseJob] | None) -> Any:
    """What ``@job`` registers for ``target``: a ``BaseJob`` subclass becomes its one instance;
    a function with ``base`` becomes an instance of a subclass of ``base`` whose ``run`` is the
    function (named as the function, so the job's default name does not change)."""
    if isinstance(target, type):
        if base is not None:
            raise QueueError(
                ErrorCode.INVALID_HANDLER,
                f"base= is for function jobs; make {target.__qualname__} subclass it instead",
            )
        if not issubclass(target, BaseJob):
            raise QueueError(
                ErrorCode.INVALID_HANDLER,
                f"@job on a class needs a BaseJob subclass; {target.__qualname__} is not one",
            )
        return _named(target(), target)
    if base is None:
        return target
    if not (isinstance(base, type) and issubclass(base, BaseJob)):
        raise QueueError(
            ErrorCode.INVALID_HANDLER, f"base must be a BaseJob subclass, not {base!r}"
        )
    if not callable(target):
        raise QueueError(ErrorCode.INVALID_HANDLER, f"{target!r} is not callable")
    cls = type(
        getattr(target, "__name__", base.__name__),
        (base,),
        {
            "run": staticmethod(target),
            "__module__": getattr(target, "__module__", base.__module__),
            "__qualname__": getattr(target, "__qualname__", base.__qualname__),
            "__doc__": getattr(target, "__doc__", None),
        },
    )
    return _named(cls(), target)


def _named(instance: BaseJob, source: Any) -> BaseJob:
    """The instance answers the module and qualified name of what was decorated: the job's
    default name, and the registry's check that a name is not taken by other code."""
    instance.__module__ = source.__module__
    instance.__qualname__ = source.__qualname__  # type: ignore[attr-defined]
    return instance
