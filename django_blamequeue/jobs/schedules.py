"""Schedules declared in code (``@job(schedule=...)``, ``@periodic``), and what every
schedule's call is.

A declared schedule is an entry of the same shape as a ``SCHEDULES`` one (docs/schedules.md);
the scheduler mirrors both into the ``Schedule`` table (``source`` ``"code"`` and
``"settings"``; a ``SCHEDULES`` entry of the same name replaces a declared one). Each
schedule calls its job as the handler is written: ``args``/``kwargs`` are a call's arguments,
``payload`` the one argument of a payload handler, and neither calls a handler that needs no
argument with none (``calls.call_with``). A call that cannot bind to the handler's signature
is refused where it is declared, reported by ``manage.py check`` (``blamequeue.E043``) and
never fired.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from django_blamequeue.conf.values import schedule_errors
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs import calls

if TYPE_CHECKING:
    from django_blamequeue.jobs.registry import JobDefinition

_lock = threading.Lock()
_declared: dict[str, Mapping[str, Any]] = {}
_version = 0


def payload_of(entry: Mapping[str, Any]) -> Any:
    """What a schedule's job is enqueued with: a call of ``args``/``kwargs``, else its
    ``payload`` (None: no argument for a handler that needs none)."""
    if entry.get("args") is not None or entry.get("kwargs") is not None:
        return calls.envelope(entry.get("args") or (), entry.get("kwargs") or {})
    return entry.get("payload")


def call_problem(entry: Mapping[str, Any], definition: JobDefinition) -> str | None:
    """Why this schedule's call cannot run its job (None: it binds)."""
    payload = payload_of(entry)
    if definition.flow is not None:
        if calls.is_call(payload):
            return f"{definition.name} is a @flow: give it a payload, not args or kwargs"
        return None
    why = calls.bind_problem(definition.func, payload)
    if why is None:
        return None
    shown = (
        f"{definition.name}(*{payload[calls.ARGS]!r}, **{payload[calls.KWARGS]!r})"
        if calls.is_call(payload)
        else f"{definition.name}({'' if payload is None else repr(payload)})"
    )
    return f"calls {shown[:200]}, which cannot bind: {why}"


def declare(
    definition: JobDefinition,
    schedule: str | float | timedelta,
    *,
    timezone: str = "UTC",
    name: str | None = None,
    args: Any = None,
    kwargs: Any = None,
    payload: Any = None,
    queue: str | None = None,
    backend: str | None = None,
    overlap: str = "skip",
    expires: float | None = None,
    enabled: bool = True,
) -> Mapping[str, Any]:
    """Declare a schedule of ``definition``: a cron expression (text) or an interval (seconds
    or a ``timedelta``). Checked here as ``SCHEDULES`` entries are (``INVALID_HANDLER``
    naming the problem): nothing is declared when it raises."""
    entry: dict[str, Any] = {"job": definition.name, "timezone": timezone}
    if isinstance(schedule, str):
        entry["cron"] = schedule
    elif isinstance(schedule, timedelta):
        entry["interval"] = schedule.total_seconds()
    else:
        entry["interval"] = schedule
    optional = {
        "args": list(args) if isinstance(args, tuple) else args,
        "kwargs": kwargs,
        "payload": payload,
        "queue": queue,
        "backend": backend,
        "expires": expires,
    }
    entry |= {k: v for k, v in optional.items() if v is not None}
    entry |= {"overlap": overlap, "enabled": enabled}
    label = name or definition.name
    problems = schedule_errors(entry)
    if not problems and (why := call_problem(entry, definition)) is not None:
        problems.append(why)
    if problems:
        raise QueueError(ErrorCode.INVALID_HANDLER, f"schedule {label!r}: " + "; ".join(problems))
    frozen = MappingProxyType(entry)
    global _version
    with _lock:
        old = _declared.get(label)
        if old is not None and dict(old) != entry:  # the same again (a re-import) is fine
            raise QueueError(
                ErrorCode.INVALID_HANDLER,
                f"schedule {label!r} is already declared ({old['job']}); give this one a name=",
            )
        _declared[label] = frozen
        _version += 1
    return frozen


def declared() -> tuple[int, dict[str, Mapping[str, Any]]]:
    """The schedules declared in code, by name, and a number that changes with them."""
    with _lock:
        return _version, dict(_declared)


def forget(name: str) -> None:
    """For tests that declare throwaway schedules."""
    global _version
    with _lock:
        if _declared.pop(name, None) is not None:
            _version += 1
