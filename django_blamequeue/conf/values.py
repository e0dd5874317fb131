"""The pieces ``validator`` and the table of backends check settings values with: predicates,
the bounds they state in messages, the per-key table of scalar settings, and a schedule entry's
errors. Pure functions of their inputs."""

from __future__ import annotations

import base64
import binascii
import difflib
import math
import zoneinfo
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeGuard

from kombu.exceptions import SerializerNotInstalled
from kombu.serialization import dumps as _kombu_dumps
from kombu.serialization import registry

from django_blamequeue.conf.schema import LOG_TRACEBACKS, OVERLAPS, SCHEDULE_KEYS
from django_blamequeue.core.schedules import cron_error
from django_blamequeue.core.validation import MAX_INT, MAX_SECONDS, MIN_INTERVAL, json_problem

dumps: Callable[..., tuple[str, str, str | bytes]] = _kombu_dumps  # kombu is untyped


def schedule_errors(entry: Mapping[str, Any]) -> list[str]:
    errors = [
        f"{key!r} is not a schedule key.{closest(key, SCHEDULE_KEYS)}"
        for key in entry
        if key not in SCHEDULE_KEYS
    ]
    if not isinstance(entry.get("job"), str) or not entry["job"]:
        errors.append(f'"job" is {entry.get("job")!r}; expected a job name')
    cron, interval = entry.get("cron"), entry.get("interval")
    if (cron is None) == (interval is None):
        errors.append('give exactly one of "cron" and "interval"')
    elif cron is not None:
        if why := cron_error(cron) if isinstance(cron, str) else "is not a str":
            errors.append(f'"cron" {cron!r} {why}')
    elif not (is_number(interval) and MIN_INTERVAL <= interval <= MAX_SECONDS):
        errors.append(f'"interval" is {interval!r}; expected {MIN_INTERVAL:g} to {MAX_SECONDS:,} s')
    for key in ("payload", "args", "kwargs"):
        if (why := json_problem(entry.get(key))) is not None:
            errors.append(f'"{key}" {why}')
    args, kwargs = entry.get("args"), entry.get("kwargs")
    if args is not None and not isinstance(args, list | tuple):
        errors.append(f'"args" is {args!r}; expected a list of positional arguments')
    if kwargs is not None and not (
        isinstance(kwargs, Mapping) and all(isinstance(k, str) for k in kwargs)
    ):
        errors.append(f'"kwargs" is {kwargs!r}; expected a dict of keyword arguments')
    if entry.get("payload") is not None and (args is not None or kwargs is not None):
        errors.append('give "payload" (one argument) or "args"/"kwargs" (a call), not both')
    overlap = entry.get("overlap", "skip")
    if overlap not in OVERLAPS:
        errors.append(f'"overlap" is {overlap!r}; expected "skip" or "allow"')
    expires = entry.get("expires")
    if expires is not None and not (is_number(expires) and 0 < expires <= MAX_SECONDS):
        errors.append(f'"expires" is {expires!r}; expected seconds > 0 and ≤ {MAX_SECONDS:,}')
    tz = entry.get("timezone")
    if tz is not None and not is_zone(tz):
        errors.append(f'"timezone" is {tz!r}, not an IANA time zone such as "Europe/Paris"')
    queue = entry.get("queue")
    if queue is not None and (not isinstance(queue, str) or not queue):
        errors.append(f'"queue" is {queue!r}; expected a non-empty queue name')
    return errors


def route_errors(routes: object) -> list[str]:
    """What is wrong with ``ROUTES``: job names or globs → a queue name, or ``{"queue": …}``."""
    if not isinstance(routes, Mapping):
        return [f"is {routes!r}; expected a dict of job name (or glob) -> queue"]
    errors = []
    for pattern, target in routes.items():
        if not isinstance(pattern, str) or not pattern:
            errors.append(f"{pattern!r}: a route's key must be a job name or a glob")
            continue
        queue = target.get("queue") if isinstance(target, Mapping) else target
        extra = set(target) - {"queue"} if isinstance(target, Mapping) else set()
        if extra:
            errors.append(f'{pattern!r}: only "queue" may be routed, not {sorted(extra)}')
        if not isinstance(queue, str) or not queue.strip() or len(queue) > 200:
            errors.append(f"{pattern!r} routes to {target!r}; expected a queue name")
    return errors


def closest(word: object, choices: Iterable[str]) -> str:
    """' Did you mean "X"?' for the nearest choice (case-insensitive), or ""."""
    by_upper = {c.upper(): c for c in choices}
    found = difflib.get_close_matches(str(word).upper(), list(by_upper), n=1)
    return f' Did you mean "{by_upper[found[0]]}"?' if found else ""


def kind(value: object) -> str:
    return type(value).__name__


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_names(value: object) -> bool:
    """A list or tuple of non-empty strings (a bare string is not)."""
    return isinstance(value, list | tuple) and all(isinstance(v, str) and v for v in value)


def is_fernet_key(value: object) -> bool:
    """A Fernet key: 32 bytes as url-safe base64 (a str or bytes), checked without importing
    ``cryptography`` so that settings validate where the extra is not installed."""
    if isinstance(value, str):
        value = value.encode("ascii", "replace")
    if not isinstance(value, bytes):
        return False
    try:
        return len(base64.urlsafe_b64decode(value)) == 32
    except (binascii.Error, ValueError):
        return False


def can_encode(name: object) -> bool:
    """Whether kombu has an encoder installed under ``name`` (yaml/msgpack may be missing)."""
    if not isinstance(name, str) or name not in registry.name_to_type:
        return False
    try:
        dumps(None, serializer=name)
    except SerializerNotInstalled:
        return False
    except Exception:  # installed, but a custom encoder may refuse None: still usable
        return True
    return True


def is_zone(name: object) -> bool:
    if not isinstance(name, str):
        return False
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return True


SECONDS = f"seconds > 0 (at most {MAX_SECONDS:,})"
SECONDS_0 = f"seconds >= 0 (at most {MAX_SECONDS:,})"
COUNT_1 = f"an int from 1 to {MAX_INT:,}"
COUNT_0 = f"an int from 0 to {MAX_INT:,}"
RATE = f"(max, per_seconds): max {COUNT_1}, per_seconds {SECONDS}"

#: key -> (validates, what it should be); a failure is E012. Seconds and counts stop where the
#: API's arguments do (``validation.MAX_SECONDS``, ``MAX_INT``): every engine stores them.
SCALARS: Mapping[str, tuple[Callable[[Any], bool], str]] = {
    "DEFAULT_LEASE": (lambda v: is_number(v) and 0 < v <= MAX_SECONDS, SECONDS),
    "DEFAULT_MAX_ATTEMPTS": (lambda v: is_int(v) and 1 <= v <= MAX_INT, COUNT_1),
    "MAX_STALLED_COUNT": (lambda v: is_int(v) and 0 <= v <= MAX_INT, COUNT_0),
    "BACKOFF_BASE": (lambda v: is_number(v) and 0 <= v <= MAX_SECONDS, SECONDS_0),
    "BACKOFF_MAX": (lambda v: is_number(v) and 0 <= v <= MAX_SECONDS, SECONDS_0),
    "BACKOFF_JITTER": (lambda v: isinstance(v, bool), "True or False"),
    "PROGRESS_THROTTLE": (lambda v: is_number(v) and 0 <= v <= MAX_SECONDS, SECONDS_0),
    "SWEEP_INTERVAL": (lambda v: is_number(v) and 0 < v <= MAX_SECONDS, SECONDS),
    "FLOW_SWEEP_INTERVAL": (lambda v: is_number(v) and 0 < v <= MAX_SECONDS, SECONDS),
    "SHUTDOWN_GRACE": (lambda v: is_number(v) and 0 <= v <= MAX_SECONDS, SECONDS_0),
    "MAX_FLOW_DEPTH": (lambda v: is_int(v) and v >= 1, "an int >= 1"),
    "MAX_SNOOZES": (lambda v: is_int(v) and 0 <= v <= MAX_INT, COUNT_0),
    "MISSING_HANDLER_TIMEOUT": (lambda v: is_number(v) and 0 < v <= MAX_SECONDS, SECONDS),
    "WORKER_STALLED_AFTER": (lambda v: is_number(v) and 0 < v <= MAX_SECONDS, SECONDS),
    "ORIGIN_SITE": (lambda v: isinstance(v, bool), "True or False"),
    "LOG_TRACEBACKS": (lambda v: v in LOG_TRACEBACKS, " or ".join(map(repr, LOG_TRACEBACKS))),
    "ATTEMPT_HISTORY": (lambda v: v in ("failures", "all", "off"), '"failures", "all" or "off"'),
}
