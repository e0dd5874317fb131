"""The shape of the ``BLAMEQUEUE`` setting: its keys, how a problem with it is named, and the
``Findings`` a check adds problems to. Read by ``conf`` (which builds ``Settings``), ``validator``
and the table of backends (``engines``), so none needs another's internals."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kombu.serialization import registry


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One thing wrong with the configuration: ``id`` is stable, ``message`` says what and where."""

    id: str
    message: str
    hint: str = ""
    level: Literal["error", "warning"] = "error"


class Where:
    """Names a place in the configuration, the way the user wrote it.

    Settings paths render as ``BLAMEQUEUE["BACKENDS"]["fast"]["PROTOCOL"]``; for the environment
    boot, ``names`` maps a path to the variable that set it (``BLAMEQUEUE_REDIS_URL``).
    """

    def __init__(self, names: Mapping[tuple[str, ...], str] | None = None) -> None:
        self.environment = names is not None
        self._names = names or {}

    def __call__(self, *path: object) -> str:
        if name := self._names.get(tuple(str(p) for p in path)):
            return name
        if self.environment:
            return f"{path[0]}{_subscripts(path[1:])} (BLAMEQUEUE_* environment)"
        return f"BLAMEQUEUE{_subscripts(path)}"


def _subscripts(path: tuple[object, ...]) -> str:
    return "".join(f'["{p}"]' if isinstance(p, str) else f"[{p!r}]" for p in path)


SETTINGS_WHERE = Where()


class Findings:
    """The problems found so far, and what a check needs to word and judge them: how to name a
    place (``where``), the ``DATABASES`` and ``CACHES`` an option may name."""

    def __init__(
        self, where: Where, databases: Mapping[str, Any], caches: Mapping[str, Any]
    ) -> None:
        self.where, self.databases, self.caches = where, databases, caches
        self.found: list[Problem] = []
        self.implied = False  # no "BACKENDS" in the setting: its "default" is not written there

    def add(
        self, id_: str, message: str, hint: str = "", level: Literal["error", "warning"] = "error"
    ) -> None:
        self.found.append(Problem(id=id_, message=message, hint=hint, level=level))


def content_type_of(name: str) -> str | None:
    """The content type for a kombu serializer name or content type; None if kombu knows neither."""
    if "/" in name:
        return name
    content_type: str | None = registry.name_to_type.get(name)
    return content_type


TOP_KEYS = (
    "BACKENDS",
    "DEFAULT_BACKEND",
    "SERIALIZER",
    "ACCEPT_CONTENT",
    "MAX_PAYLOAD_BYTES",
    "AUDIT",
    "SCHEDULES",
    "DEFAULT_LEASE",
    "DEFAULT_MAX_ATTEMPTS",
    "MAX_STALLED_COUNT",
    "BACKOFF_BASE",
    "BACKOFF_MAX",
    "BACKOFF_JITTER",
    "PROGRESS_THROTTLE",
    "RETENTION",
    "SWEEP_INTERVAL",
    "FLOW_SWEEP_INTERVAL",
    "SHUTDOWN_GRACE",
    "MAX_FLOW_DEPTH",
    "QUEUES",
    "MAX_SNOOZES",
    "MISSING_HANDLER_TIMEOUT",
    "WORKER_STALLED_AFTER",
    "ORIGIN_SITE",
    "LOG_TRACEBACKS",
    "ATTEMPT_HISTORY",
    "ROUTES",
)
#: ``LOG_TRACEBACKS``: which failed attempts the worker logs with their traceback.
LOG_TRACEBACKS = ("final", "every", "never")
#: Keys of a ``QUEUES`` entry: the default limits of that queue (docs/control.md).
QUEUE_KEYS = ("CONCURRENCY", "KEY_CONCURRENCY", "RATE_LIMIT", "KEY_RATE_LIMIT", "KEY_WEIGHTS")
RETENTION_KEYS = ("DONE", "CANCELLED", "FAILED", "AUDIT", "EVENTS")
AUDIT_LEVELS = ("all", "operations", "off")
SCHEDULE_KEYS = (
    "job",
    "cron",
    "interval",
    "timezone",
    "payload",
    "args",
    "kwargs",
    "queue",
    "enabled",
    "backend",
    "overlap",
    "expires",
)
#: ``overlap`` of a schedule: skip an occurrence while its last run waits or runs, or fire.
OVERLAPS = ("skip", "allow")
UNSAFE_CONTENT = {"application/x-python-serialize": "pickle", "application/x-yaml": "yaml"}
