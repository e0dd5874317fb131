"""The one reader of the ``BLAMEQUEUE`` setting and the ``BLAMEQUEUE_*`` environment.

Everything else asks :func:`get_settings` for a frozen :class:`Settings`. The system check
(``checks.py``) and the runtime refusal both come from :func:`problems`, so ``manage.py check``
and a worker never disagree about what is wrong.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed

from django_blamequeue.conf.engines import BACKEND_DEFAULTS, ENGINES, engine_class, row_of
from django_blamequeue.conf.schema import SETTINGS_WHERE, Problem, Where, content_type_of
from django_blamequeue.conf.validator import validate
from django_blamequeue.core.controls import QueueLimits
from django_blamequeue.core.validation import key_weight_pairs
from django_blamequeue.exceptions import ErrorCode, QueueError

__all__ = [
    "BACKEND_DEFAULTS",
    "ENGINES",
    "BackendConfig",
    "Problem",
    "Settings",
    "Where",
    "backend_config",
    "content_type_of",
    "get_settings",
    "problems",
    "reset",
]

_DAY = 86400.0


def _frozen(mapping: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendConfig:
    """One entry of ``BACKENDS``, defaults filled in; ``options`` excludes PROTOCOL, BACKEND
    and QUEUES. An entry that names its ``BACKEND`` has its class's ``protocol`` here."""

    alias: str
    protocol: str
    options: Mapping[str, Any]
    queues: tuple[str, ...] | None = None  # the queue names this backend may serve; None = any
    #: The ``Backend`` subclass to build, by dotted path: the entry's BACKEND, else its
    #: protocol's (``engines.ENGINES``).
    engine: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """The validated configuration. Durations are seconds; a retention of None keeps forever."""

    backends: Mapping[str, BackendConfig]
    default_backend: str = "default"
    serializer: str = "json"
    accept_content: tuple[str, ...] = ("json",)  # kombu serializer names or content types
    max_payload_bytes: int = 1_048_576
    audit: str = "operations"
    schedules: Mapping[str, Mapping[str, Any]] = field(default_factory=_frozen)
    default_lease: float = 30.0
    default_max_attempts: int = 3
    max_stalled_count: int = 1
    backoff_base: float = 1.0
    backoff_max: float = 300.0
    backoff_jitter: bool = False
    progress_throttle: float = 0.25
    retention_done: float | None = 7 * _DAY
    retention_cancelled: float | None = 7 * _DAY
    retention_failed: float | None = None  # the DLQ is kept until retried or purged
    retention_audit: float | None = 30 * _DAY
    #: How long an event sent before any workflow waits for it is kept for the first waiter.
    retention_events: float | None = 7 * _DAY
    sweep_interval: float = 5.0
    flow_sweep_interval: float = 30.0
    shutdown_grace: float = 30.0
    max_flow_depth: int = 5
    #: ``QUEUES``: each queue's default limits (a live ``set_limits`` replaces them).
    queues: Mapping[str, QueueLimits] = field(default_factory=_frozen)
    max_snoozes: int = 100
    missing_handler_timeout: float = 7 * _DAY
    #: A worker whose loop has neither claimed nor acked for this long while jobs are due,
    #: with no handler running, is shown as ``stalled`` (docs/operations.md).
    worker_stalled_after: float = 60.0
    origin_site: bool = True  # record the enqueue's call site in JobInfo.origin
    #: When the worker logs a failed attempt's traceback: "final" (once, when the job goes to
    #: the DLQ; a retry is one WARNING line), "every" (each failed attempt) or "never".
    log_tracebacks: str = "final"
    #: Which attempts a job's history keeps: "failures" (every attempt not done), "all", "off".
    attempt_history: str = "failures"
    #: ``ROUTES``: job name or glob → queue, in the order given (``jobs/routing.py``).
    routes: tuple[tuple[str, str], ...] = ()


_UNSET: Any = object()
_cached: Settings | None = None

#: Settings whose change invalidates the cache: ours, and the ones validation looks into.
_WATCHED = frozenset({"BLAMEQUEUE", "DATABASES", "CACHES"})

# A message about the whole "default" entry says where it came from: nobody wrote it as such.
_ENTRY = ("BACKENDS", "default")
_BY_VARIABLE = 'the backend "default" that BLAMEQUEUE_PROTOCOL sets up (no BLAMEQUEUE setting)'
_BUILT_IN = 'the built-in backend "default" (no BLAMEQUEUE setting, no BLAMEQUEUE_PROTOCOL)'
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def _protocol_of(environ: Mapping[str, str]) -> str:
    return environ.get("BLAMEQUEUE_PROTOCOL", "").strip().lower() or "local"


def _variables(protocol: str) -> Mapping[str, str]:
    """The protocol's ``BLAMEQUEUE_*`` variables (its row of the table), variable -> option."""
    row = ENGINES.get(protocol)
    return row.environment if row is not None else {}


def _raw_from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """The ``BLAMEQUEUE`` dict the ``BLAMEQUEUE_*`` variables describe: one backend, "default".

    Empty variables count as unset. An unrecognised value of a bool option (TLS) is kept as a
    string so that validation names the variable.
    """
    protocol = _protocol_of(environ)
    entry: dict[str, Any] = {"PROTOCOL": protocol}
    for variable, option in _variables(protocol).items():
        value = environ.get(variable, "")
        if value == "":
            continue
        if option in ENGINES[protocol].flags and value.strip().lower() in _TRUE | _FALSE:
            entry[option] = value.strip().lower() in _TRUE
        else:
            entry[option] = value
    return {"BACKENDS": {"default": entry}}


def _environment_where(environ: Mapping[str, str]) -> Where:
    """Messages about the environment boot name the variables, and say where "default" came
    from."""
    names: dict[tuple[str, ...], str] = {
        (*_ENTRY, option): variable
        for variable, option in _variables(_protocol_of(environ)).items()
    }
    names[(*_ENTRY, "PROTOCOL")] = "BLAMEQUEUE_PROTOCOL"
    chosen = environ.get("BLAMEQUEUE_PROTOCOL", "").strip()
    names[_ENTRY] = _BY_VARIABLE if chosen else _BUILT_IN
    return Where(names)


def _current() -> tuple[object, Where]:
    """The raw configuration in force and how to name its places in messages."""
    raw = getattr(django_settings, "BLAMEQUEUE", _UNSET)
    if raw is _UNSET:
        return _raw_from_environment(os.environ), _environment_where(os.environ)
    return raw, SETTINGS_WHERE


def problems(raw: object = _UNSET) -> list[Problem]:
    """Errors and warnings for ``raw``, or for the configuration in force when omitted."""
    where = SETTINGS_WHERE
    if raw is _UNSET:
        raw, where = _current()
    return _validate(raw, where)


def _validate(raw: object, where: Where) -> list[Problem]:
    databases = getattr(django_settings, "DATABASES", {})
    caches = getattr(django_settings, "CACHES", {})
    return validate(raw, where=where, databases=databases, caches=caches)


def get_settings() -> Settings:
    """The validated settings, built once and cached until :func:`reset`.

    Raises ``QueueError(INVALID_CONFIG)`` carrying the first error's id and message, or
    ``PROTOCOL_UNAVAILABLE`` when that error is an amqp/nats backend (E004). Invalid settings
    are not cached: each call reports them again.
    """
    global _cached
    if _cached is None:
        raw, where = _current()
        errors = [p for p in _validate(raw, where) if p.level == "error"]
        if errors:
            first = errors[0]
            code = (
                ErrorCode.PROTOCOL_UNAVAILABLE if first.id == "E004" else ErrorCode.INVALID_CONFIG
            )
            raise QueueError(code, f"{first.id}: {first.message}")
        assert isinstance(raw, Mapping)  # validate() reports E001 otherwise
        _cached = _build(raw)
    return _cached


def reset() -> None:
    """Forget the cached settings; the next :func:`get_settings` reads them again."""
    global _cached
    _cached = None


def backend_config(alias: str | None = None) -> BackendConfig:
    """The configuration of backend ``alias`` (the default backend when None)."""
    current = get_settings()
    name = current.default_backend if alias is None else alias
    try:
        return current.backends[name]
    except KeyError:
        configured = ", ".join(current.backends)
        message = f"no backend {name!r} in BLAMEQUEUE['BACKENDS']; configured: {configured}"
        raise QueueError(ErrorCode.UNKNOWN_BACKEND, message) from None


def _build(raw: Mapping[str, Any]) -> Settings:
    """A :class:`Settings` from an already validated raw dict."""
    backends = raw.get("BACKENDS", {"default": {"PROTOCOL": "local"}})
    retention = raw.get("RETENTION", {})
    kwargs: dict[str, Any] = {key.lower(): raw[key] for key in _PLAIN_KEYS if key in raw} | {
        f"retention_{key.lower()}": retention[key] for key in retention
    }
    for name in _FLOAT_FIELDS:
        if kwargs.get(name) is not None:
            kwargs[name] = float(kwargs[name])
    if "accept_content" in kwargs:
        kwargs["accept_content"] = tuple(kwargs["accept_content"])
    schedules = raw.get("SCHEDULES", {})
    queues = raw.get("QUEUES", {})
    return Settings(
        backends=MappingProxyType({a: _backend(a, e) for a, e in backends.items()}),
        schedules=MappingProxyType({n: _frozen(e) for n, e in schedules.items()}),
        queues=MappingProxyType({q: _limits(e) for q, e in queues.items()}),
        routes=tuple(
            (pattern, target["queue"] if isinstance(target, Mapping) else target)
            for pattern, target in raw.get("ROUTES", {}).items()
        ),
        **kwargs,
    )


def _limits(entry: Mapping[str, Any]) -> QueueLimits:
    """A validated ``QUEUES`` entry as ``QueueLimits`` (rates as ``(int, float)``)."""

    def rate(value: Any) -> tuple[int, float] | None:
        return None if value is None else (int(value[0]), float(value[1]))

    return QueueLimits(
        concurrency=entry.get("CONCURRENCY"),
        key_concurrency=entry.get("KEY_CONCURRENCY"),
        rate_limit=rate(entry.get("RATE_LIMIT")),
        key_rate_limit=rate(entry.get("KEY_RATE_LIMIT")),
        key_weights=key_weight_pairs(entry.get("KEY_WEIGHTS")),
    )


def _backend(alias: str, entry: Mapping[str, Any]) -> BackendConfig:
    """A validated entry with its protocol's defaults (the row of its engine's protocol for a
    ``BACKEND``: none if that has no row)."""
    if "BACKEND" in entry:
        engine = engine_class(entry["BACKEND"])
        assert isinstance(engine, type)  # validate() reports E014 otherwise
        row, protocol, path = row_of(engine), str(getattr(engine, "protocol", "")), entry["BACKEND"]
    else:
        protocol = entry["PROTOCOL"]
        row = ENGINES[protocol]
        path = row.path
    options = {**(row.defaults if row is not None else {}), **entry}
    options.pop("PROTOCOL", None)
    options.pop("BACKEND", None)
    queues = options.pop("QUEUES", None)
    return BackendConfig(
        alias=alias,
        protocol=protocol,
        options=_frozen(options),
        queues=None if queues is None else tuple(queues),
        engine=path,
    )


_PLAIN_KEYS = (
    "DEFAULT_BACKEND",
    "SERIALIZER",
    "ACCEPT_CONTENT",
    "MAX_PAYLOAD_BYTES",
    "AUDIT",
    "DEFAULT_LEASE",
    "DEFAULT_MAX_ATTEMPTS",
    "MAX_STALLED_COUNT",
    "BACKOFF_BASE",
    "BACKOFF_MAX",
    "BACKOFF_JITTER",
    "PROGRESS_THROTTLE",
    "SWEEP_INTERVAL",
    "FLOW_SWEEP_INTERVAL",
    "SHUTDOWN_GRACE",
    "MAX_FLOW_DEPTH",
    "MAX_SNOOZES",
    "MISSING_HANDLER_TIMEOUT",
    "WORKER_STALLED_AFTER",
    "ORIGIN_SITE",
    "LOG_TRACEBACKS",
    "ATTEMPT_HISTORY",
)
_FLOAT_FIELDS = (
    "default_lease",
    "backoff_base",
    "backoff_max",
    "progress_throttle",
    "retention_done",
    "retention_cancelled",
    "retention_failed",
    "retention_audit",
    "retention_events",
    "sweep_interval",
    "flow_sweep_interval",
    "shutdown_grace",
    "missing_handler_timeout",
    "worker_stalled_after",
)


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    """Keep ``override_settings`` honest: a changed setting is re-read on next use."""
    if setting in _WATCHED:
        reset()


setting_changed.connect(_on_setting_changed, dispatch_uid="django_blamequeue.conf.reset")
