"""Celery-style calls of a ``@job``: positional and keyword arguments, ``countdown``, ``eta``.

A job takes one payload. ``send_welcome.delay(42, lang="de")`` stores the payload
``{"__args__": [42], "__kwargs__": {"lang": "de"}}`` — an *argument envelope* — and the
worker calls ``send_welcome(42, lang="de")``. A payload that is a dict of exactly those two
keys is a call, whoever enqueued it (``blamequeue enqueue NAME --payload '{"__args__": [42],
"__kwargs__": {}}'`` makes one too); any other payload is passed as the one argument, as
before. The arguments travel through the serializer like any payload (JSON by default: a
tuple comes back a list, dict keys are strings).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django_blamequeue.core.records import EnqueuedJob
from django_blamequeue.exceptions import ErrorCode, QueueError

if TYPE_CHECKING:
    from django_blamequeue.jobs.registry import JobDefinition

ARGS = "__args__"
KWARGS = "__kwargs__"
_KEYS = frozenset({ARGS, KWARGS})


def envelope(args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The payload of a call with ``args`` and ``kwargs``."""
    if isinstance(args, str | bytes | Mapping) or not isinstance(args, Sequence):
        raise QueueError(ErrorCode.BAD_ARGUMENT, f"args must be a list or tuple, not {args!r:.60}")
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise QueueError(ErrorCode.BAD_ARGUMENT, "kwargs must be a dict with string keys")
    return {ARGS: list(args), KWARGS: dict(kwargs)}


def is_call(payload: Any) -> bool:
    return (
        isinstance(payload, dict)
        and payload.keys() == _KEYS
        and isinstance(payload[ARGS], list)
        and isinstance(payload[KWARGS], dict)
    )


def call_with(func: Callable[..., Any], payload: Any) -> Any:
    """Run a handler for ``payload``: an envelope's arguments, or the payload itself."""
    if is_call(payload):
        return func(*payload[ARGS], **payload[KWARGS])
    return func(payload)


def aliases(options: dict[str, Any]) -> dict[str, Any]:
    """Celery's names for the enqueue options: ``countdown`` (seconds) is ``delay``, ``eta``
    (an aware datetime) is ``run_at``. Giving both names of one option, or a countdown and
    an eta, is ``BAD_ARGUMENT``."""
    if "countdown" not in options and "eta" not in options:
        return options
    options = dict(options)
    for alias, name in (("countdown", "delay"), ("eta", "run_at")):
        if alias in options:
            value = options.pop(alias)
            if options.get(name) is not None:
                raise QueueError(ErrorCode.BAD_ARGUMENT, f"give {alias}= or {name}=, not both")
            options[name] = value
    if options.get("delay") is not None and options.get("run_at") is not None:
        raise QueueError(ErrorCode.BAD_ARGUMENT, "give a countdown (delay) or an eta (run_at)")
    return options


def apply_async(
    definition: JobDefinition,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
) -> EnqueuedJob:
    """Enqueue a call of ``definition`` with these arguments (``options`` as ``enqueue``'s,
    ``countdown`` and ``eta`` included)."""
    if definition.flow is not None:
        raise QueueError(
            ErrorCode.BAD_ARGUMENT,
            f"{definition.name} is a @flow: it takes one payload, enqueue it with .enqueue()",
        )
    return definition.enqueue(envelope(args or (), kwargs), **dict(options or {}))
