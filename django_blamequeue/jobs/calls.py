"""Celery-style calls of a ``@job``: positional and keyword arguments, and ``apply_async``'s
options (``countdown``, ``eta``, ``queue``, ``expires``, ``headers``, and the ones with no
meaning here).

A job takes one payload. ``send_welcome.delay(42, lang="de")`` stores the payload
``{"__args__": [42], "__kwargs__": {"lang": "de"}}`` — an *argument envelope* — and the
worker calls ``send_welcome(42, lang="de")``. A payload that is a dict of exactly those two
keys is a call, whoever enqueued it (``blamequeue enqueue NAME --payload '{"__args__": [42],
"__kwargs__": {}}'`` makes one too); any other payload is passed as the one argument, as
before. The arguments travel through the serializer like any payload (JSON by default: a
tuple comes back a list, dict keys are strings).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django_blamequeue.conf import get_settings
from django_blamequeue.core import validation
from django_blamequeue.core.options import CALL_OPTIONS
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
    """Run a handler for ``payload``: an envelope's arguments, or the payload itself. No
    payload (None) is no argument for a handler that needs none: ``def cleanup()`` and
    ``def cleanup(batch_size=500)`` are called as written, never with ``None``."""
    if is_call(payload):
        return func(*payload[ARGS], **payload[KWARGS])
    if payload is None and not needs_argument(func):
        return func()
    return func(payload)


#: ``needs_argument``'s answers, by the function's id (the function kept: ids are reused).
_needs: dict[int, tuple[Callable[..., Any], bool]] = {}


def needs_argument(func: Callable[..., Any]) -> bool:
    """Does ``func`` require one positional argument (a payload handler)? A function that
    cannot be inspected is taken to (the old call, ``func(payload)``)."""
    cached = _needs.get(id(func))
    if cached is not None and cached[0] is func:
        return cached[1]
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        answer = True
    else:
        answer = any(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
            for p in parameters
        )
    if len(_needs) >= 4096:
        _needs.clear()
    _needs[id(func)] = (func, answer)
    return answer


def bind_problem(func: Callable[..., Any], payload: Any) -> str | None:
    """Why calling ``func`` for ``payload`` (as ``call_with`` would) cannot bind to its
    signature, or None: a schedule's call is checked this way before it ever runs."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    try:
        if is_call(payload):
            signature.bind(*payload[ARGS], **payload[KWARGS])
        elif payload is None and not needs_argument(func):
            signature.bind()
        else:
            signature.bind(payload)
    except TypeError as exc:
        return f"{exc} (the signature is {func.__name__}{signature})"
    return None


#: ``apply_async`` options with no meaning here: accepted and ignored (docs/migrating.md).
IGNORED = frozenset(
    {
        "compression",  # payloads are stored as the serializer writes them
        "ignore_result",  # a result is a column of the job; None stores nothing
        "store_errors_even_if_ignored",
        "retry",  # publishing retries: an enqueue is one transaction, all or nothing
        "retry_policy",
        "add_to_parent",
        "publisher",
        "producer",
        "connection",
        "mandatory",
        "delivery_mode",  # every job is durable
    }
)
#: ``apply_async`` options refused, with what to use instead.
REPLACED = {
    "serializer": "the SERIALIZER setting (one serializer for every job)",
    "exchange": "queue=",
    "routing_key": "queue=",
    "task_id": "dedupe_key= for an idempotent enqueue (the job's id is .job_id of the answer)",
    "shadow": "@job(name=...)",
    "time_limit": "@job(timeout=...)",
    "soft_time_limit": "@job(timeout=...)",
    "link": "queue.enqueue_flow with depends_on, or a @flow (docs/flows.md)",
    "link_error": "a @flow, or handling the failure in the job (docs/flows.md)",
    "chord": "a @flow whose collect is the chord's callback (docs/flows.md)",
    "group_id": "a @flow (docs/flows.md)",
    "reply_to": "handle.result() on the enqueued job",
}
#: What else ``job.enqueue`` / ``enqueue_many`` take besides options (``enqueueing``).
BATCH = frozenset({"dedupe_keys", "concurrency_keys", "abouts"})


def split(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ``@job``'s enqueue keywords (``enqueue``, ``delay``'s and ``apply_async``'s
    options) as the options given by name (``JobOptions``) and the batch keywords.

    Celery's names are translated (``countdown``, ``eta``; ``queue`` routes the call;
    ``headers`` are kept in the job's origin); the options in ``IGNORED`` are dropped, those
    in ``REPLACED`` and any other unknown keyword refused with ``BAD_ARGUMENT`` naming what
    to use: never a bare ``TypeError``. Nothing is written when it refuses."""
    rest = aliases(dict(options))
    given: dict[str, Any] = {}
    batch: dict[str, Any] = {}
    for key, value in rest.items():
        if key in CALL_OPTIONS:
            given[key] = value
        elif key == "queue":
            if value is not None:
                given["queue"] = validation.queue_name(value)
        elif key in BATCH:
            batch[key] = value
        elif key == "headers":
            if value:
                batch["cause"] = {"headers": _headers(value)}
        elif key in IGNORED:
            continue
        elif key == "serializer" and value in (None, get_settings().serializer):
            continue  # the configured one: nothing to change
        elif key in REPLACED:
            raise QueueError(
                ErrorCode.BAD_ARGUMENT, f"{key}= has no meaning here; use {REPLACED[key]}"
            )
        else:
            known = sorted({*CALL_OPTIONS, "queue", "countdown", "eta", "headers", *BATCH})
            raise QueueError(
                ErrorCode.BAD_ARGUMENT,
                f"unknown enqueue option {key}=; the options are {', '.join(known)}",
            )
    return given, batch


def _headers(value: Any) -> dict[str, Any]:
    """Celery's ``headers=``: a dict with string keys, stored as JSON in the job's origin."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise QueueError(ErrorCode.BAD_ARGUMENT, "headers must be a dict with string keys")
    if (why := validation.json_problem(dict(value))) is not None:
        raise QueueError(ErrorCode.BAD_ARGUMENT, f"headers {why}")
    return dict(value)


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
