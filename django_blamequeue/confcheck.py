"""Validation of a raw ``BLAMEQUEUE`` mapping into a list of problems (ids in docs/checks.md).

Kept apart from ``conf`` (which imports it on first use) to keep that module readable. A pure
function of its inputs: ``conf`` passes the raw dict, ``DATABASES`` and ``CACHES``, so
the system check and the runtime refusal run the same code and can never disagree. Ids are
never renumbered or reused.
"""

from __future__ import annotations

import difflib
import math
import re
import zoneinfo
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeGuard

from kombu.exceptions import SerializerNotInstalled
from kombu.serialization import dumps as _kombu_dumps
from kombu.serialization import registry

from .confschema import (
    AUDIT_LEVELS,
    BACKEND_DEFAULTS,
    PROTOCOLS,
    RETENTION_KEYS,
    SCHEDULE_KEYS,
    SETTINGS_WHERE,
    TOP_KEYS,
    UNAVAILABLE,
    UNSAFE_CONTENT,
    Problem,
    Where,
    content_type_of,
)
from .schedules import cron_error
from .validation import MAX_INT, MAX_SECONDS, MIN_INTERVAL, json_problem

__all__ = ["validate"]

_dumps: Callable[..., tuple[str, str, str | bytes]] = _kombu_dumps  # kombu is untyped


def validate(
    raw: object,
    *,
    where: Where = SETTINGS_WHERE,
    databases: Mapping[str, Any] | None = None,
    caches: Mapping[str, Any] | None = None,
) -> list[Problem]:
    """Every problem in ``raw``, errors and warnings, in the order the keys are documented."""
    if not isinstance(raw, Mapping):
        message = f"BLAMEQUEUE must be a dict, not {type(raw).__name__}"
        return [Problem(id="E001", message=message, hint=_HINT_TOP)]
    validator = _Validator(where, databases or {}, caches or {})
    validator.unknown_keys(raw, TOP_KEYS)
    validator.backends(raw)
    validator.content(raw)
    validator.scalars(raw)
    validator.retention(raw.get("RETENTION", {}))
    validator.schedules(raw.get("SCHEDULES", {}))
    return validator.found


_HINT_TOP = 'Set BLAMEQUEUE = {"BACKENDS": {"default": {"PROTOCOL": "local"}}} or remove it.'
_HINT_PROTOCOL = "Use one of: " + ", ".join(PROTOCOLS) + "."
_HINT_SCHEDULE = (
    'A schedule is {"job": "app.jobs.name", "cron": "*/5 * * * *"} or {"job": ..., '
    '"interval": 300}, with optional "timezone", "payload" and "queue".'
)


class _Validator:
    """Collects problems; one method per settings area, each reading only its own keys."""

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

    def unknown_keys(
        self, raw: Mapping[Any, Any], known: Sequence[str], *at: str, of: str = ""
    ) -> None:
        for key in raw:
            if key not in known:
                message = f"{self.where(*at, key)} is not a known key{of}.{_closest(key, known)}"
                self.add("E001", message, "Known keys: " + ", ".join(known) + ".")

    def backends(self, raw: Mapping[str, Any]) -> None:
        backends = raw.get("BACKENDS", {"default": {"PROTOCOL": "local"}})
        self.implied = "BACKENDS" not in raw and not self.where.environment
        if not isinstance(backends, Mapping) or not backends:
            message = f"{self.where('BACKENDS')} must be a non-empty dict of alias -> entry"
            self.add("E012", message, 'For example {"default": {"PROTOCOL": "local"}}.')
            return
        for alias, entry in backends.items():
            if not isinstance(alias, str) or not alias:
                self.add(
                    "E012", f"{self.where('BACKENDS', alias)}: an alias must be a non-empty str"
                )
            elif not isinstance(entry, Mapping):
                message = f"{self.where('BACKENDS', alias)} must be a dict, not {_kind(entry)}"
                self.add("E012", message, 'For example {"PROTOCOL": "local"}.')
            else:
                self.backend(("BACKENDS", alias), entry)
        default = raw.get("DEFAULT_BACKEND", "default")
        if not isinstance(default, str) or default not in backends:
            message = f"{self.where('DEFAULT_BACKEND')} is {default!r}, not an entry of BACKENDS"
            self.add("E002", message, "Use one of: " + ", ".join(map(str, backends)) + ".")

    def backend(self, at: tuple[str, str], entry: Mapping[str, Any]) -> None:
        protocol, where = entry.get("PROTOCOL"), self.where
        if isinstance(protocol, str) and protocol in UNAVAILABLE:
            what = f"{UNAVAILABLE[protocol]} is not available"
            self.add("E004", f"{where(*at, 'PROTOCOL')} is {protocol!r}: {what}", _HINT_PROTOCOL)
            return
        if protocol not in PROTOCOLS:
            what = "is missing" if protocol is None else f"is {protocol!r}, not a known protocol"
            message = f"{where(*at, 'PROTOCOL')} {what}."
            self.add("E003", message + _closest(protocol, PROTOCOLS), _HINT_PROTOCOL)
            return
        defaults = BACKEND_DEFAULTS[protocol]
        self.unknown_keys(entry, ("PROTOCOL", "QUEUES", *defaults), *at, of=f" for {protocol}")
        options = {**defaults, **{k: v for k, v in entry.items() if k in defaults}}
        for key, value in options.items():
            if key in _NUMERIC_OPTIONS:
                continue  # checked with their ranges by the protocol's method
            expected = bool if key in ("TLS", "LISTEN") else str
            if not (isinstance(value, expected) or (value is None and defaults[key] is None)):
                self.add("E012", f"{where(*at, key)} is {value!r}; expected a {expected.__name__}")
        queues = entry.get("QUEUES")
        if queues is not None and not _is_names(queues):
            message = f"{where(*at, 'QUEUES')} is {queues!r}; expected a list of queue names"
            self.add("E012", message, "Omit QUEUES to allow any queue name.")
        {"local": self.local, "redis": self.redis, "sqs": self.sqs}[protocol](at, options)

    def local(self, at: tuple[str, str], options: Mapping[str, Any]) -> None:
        alias = options["DATABASE"]
        if alias not in self.databases:
            message = f"{self.where(*at, 'DATABASE')} is {alias!r}, not an entry of DATABASES"
            self.add("E005", message, "Use one of: " + ", ".join(self.databases) + ".")
            return
        db = self.databases[alias]
        engine = str(db.get("ENGINE", ""))
        mode = str((db.get("OPTIONS") or {}).get("transaction_mode") or "")
        if ("sqlite" in engine or "spatialite" in engine) and mode.upper() != "IMMEDIATE":
            origin = self.where(*at)
            if self.implied:
                origin = 'the backend "default" of a BLAMEQUEUE without "BACKENDS"'
            message = (
                f"{origin[0].upper()}{origin[1:]} stores jobs in the SQLite database {alias!r}, "
                'whose OPTIONS lack "transaction_mode": "IMMEDIATE"; concurrent workers will hit '
                '"database is locked"'
            )
            hint = f'Add "OPTIONS": {{"transaction_mode": "IMMEDIATE"}} to DATABASES[{alias!r}].'
            self.add("W002", message, hint, "warning")

    def redis(self, at: tuple[str, str], options: Mapping[str, Any]) -> None:
        connection, url, where = options["CONNECTION"], options["URL"], self.where
        if connection is not None and url is not None:
            message = f"{where(*at)} sets both CONNECTION and URL; it is unclear which to use"
            self.add("E006", message, "Keep one of them.")
        elif connection is not None:
            backend = str((self.caches.get(connection) or {}).get("BACKEND", ""))
            if connection not in self.caches or "redis" not in backend.lower():
                what = "no entry" if connection not in self.caches else f"a non-Redis {backend}"
                message = f"{where(*at, 'CONNECTION')} is {connection!r}: {what} of CACHES"
                self.add("E006", message, "Name a django-redis entry of CACHES, or give a URL.")
        elif url is None or not re.match(r"(redis|rediss|unix)://", url):
            what = "is missing" if url is None else f"is {url!r}, not a redis:// URL"
            message = f"{where(*at, 'URL')} {what}; a redis backend needs a URL or a CONNECTION"
            example = "e.g. redis://localhost:6379/0 (rediss:// for TLS)"
            hint = f'Set "URL" ({example}), or "CONNECTION" to a django-redis alias of CACHES.'
            if where.environment:
                hint = f"Set {where(*at, 'URL')} ({example})."
            self.add("E006", message, hint)

    def sqs(self, at: tuple[str, str], options: Mapping[str, Any]) -> None:
        where = self.where
        if not options["REGION"]:
            message = f"{where(*at, 'REGION')} is missing; an sqs backend needs an AWS region"
            self.add("E007", message, f"Set {where(*at, 'REGION')}, e.g. to 'eu-west-1'.")
        prefix = options["QUEUE_PREFIX"]
        if isinstance(prefix, str) and not re.fullmatch(r"[A-Za-z0-9_-]*", prefix):
            message = f"{where(*at, 'QUEUE_PREFIX')} is {prefix!r}; SQS allows A-Z a-z 0-9 - _"
            self.add("E012", message)
        elif isinstance(prefix, str) and len(prefix) > 40:
            message = f"{where(*at, 'QUEUE_PREFIX')} has {len(prefix)} characters; at most 40"
            self.add("E012", message, "SQS queue names have 80 characters, the prefix included.")
        endpoint = options["ENDPOINT_URL"]
        if isinstance(endpoint, str) and not re.match(r"https?://", endpoint):
            message = f"{where(*at, 'ENDPOINT_URL')} is {endpoint!r}; expected an http(s):// URL"
            self.add("E012", message)
        for key, (valid, expected) in _SQS_NUMBERS.items():
            if not valid(options[key]):
                self.add("E012", f"{where(*at, key)} is {options[key]!r}; expected {expected}")

    def content(self, raw: Mapping[str, Any]) -> None:
        accept, where = raw.get("ACCEPT_CONTENT", ["json"]), self.where
        if not _is_names(accept) or not accept:
            message = f"{where('ACCEPT_CONTENT')} is {accept!r}; expected a non-empty list"
            self.add("E008", message, 'For example ["json"].')
            return
        types = {content_type_of(item) for item in accept}
        for item in accept:
            if content_type_of(item) is None:
                message = f"{where('ACCEPT_CONTENT')} lists {item!r}, which kombu does not know"
                self.add("E008", message, f"Known serializers: {', '.join(registry.name_to_type)}.")
        for content_type, name in UNSAFE_CONTENT.items():
            if content_type in types:
                message = f"{where('ACCEPT_CONTENT')} accepts {name}: a crafted payload runs code"
                self.add(
                    "W001", message, f"Remove {name!r} unless every producer is trusted.", "warning"
                )
        serializer = raw.get("SERIALIZER", "json")
        if not _can_encode(serializer):
            message = f"{where('SERIALIZER')} is {serializer!r}, which kombu cannot encode with"
            self.add("E008", message, "Use a kombu serializer name such as 'json'.")
        elif registry.name_to_type[serializer] not in types:
            message = f"{where('SERIALIZER')} is {serializer!r}, which ACCEPT_CONTENT refuses"
            self.add("E008", message, f"Add {serializer!r} to ACCEPT_CONTENT.")

    def scalars(self, raw: Mapping[str, Any]) -> None:
        size = raw.get("MAX_PAYLOAD_BYTES", 1)
        if not _is_int(size) or size <= 0:
            message = f"{self.where('MAX_PAYLOAD_BYTES')} is {size!r}; expected a positive int"
            self.add("E009", message, "It counts bytes; the default is 1048576 (1 MiB).")
        audit = raw.get("AUDIT", "operations")
        if audit not in AUDIT_LEVELS:
            message = f"{self.where('AUDIT')} is {audit!r}; expected one of all, operations, off"
            self.add("E010", message, 'The default is "operations".')
        for key, (valid, expected) in _SCALARS.items():
            if key in raw and not valid(raw[key]):
                self.add("E012", f"{self.where(key)} is {raw[key]!r}; expected {expected}")
        base, top = raw.get("BACKOFF_BASE", 1.0), raw.get("BACKOFF_MAX", 300.0)
        if _is_number(base) and _is_number(top) and top < base:
            message = f"{self.where('BACKOFF_MAX')} is {top!r}, below BACKOFF_BASE ({base!r})"
            self.add("E012", message, "BACKOFF_MAX caps the delay; make it >= BACKOFF_BASE.")

    def retention(self, retention: object) -> None:
        if not isinstance(retention, Mapping):
            message = f"{self.where('RETENTION')} is {retention!r}; expected a dict"
            self.add("E012", message, 'For example {"DONE": 604800, "FAILED": None}.')
            return
        self.unknown_keys(retention, RETENTION_KEYS, "RETENTION")
        for key in RETENTION_KEYS:
            value = retention.get(key)
            if value is not None and not (_is_number(value) and value > 0):
                message = f"{self.where('RETENTION', key)} is {value!r}; expected seconds > 0"
                self.add("E012", message, "Use None to keep rows forever.")

    def schedules(self, schedules: object) -> None:
        if not isinstance(schedules, Mapping):
            message = f"{self.where('SCHEDULES')} is {schedules!r}; expected a dict"
            self.add("E011", message, _HINT_SCHEDULE)
            return
        for name, entry in schedules.items():
            at = self.where("SCHEDULES", name)
            if not isinstance(name, str) or not name:
                self.add("E011", f"{at}: a schedule name must be a non-empty str")
            elif not isinstance(entry, Mapping):
                self.add("E011", f"{at} must be a dict, not {_kind(entry)}", _HINT_SCHEDULE)
            else:
                for why in _schedule_errors(entry):
                    self.add("E011", f"{at}: {why}", _HINT_SCHEDULE)


def _schedule_errors(entry: Mapping[str, Any]) -> list[str]:
    errors = [
        f"{key!r} is not a schedule key.{_closest(key, SCHEDULE_KEYS)}"
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
    elif not (_is_number(interval) and MIN_INTERVAL <= interval <= MAX_SECONDS):
        errors.append(f'"interval" is {interval!r}; expected {MIN_INTERVAL:g} to {MAX_SECONDS:,} s')
    if (why := json_problem(entry.get("payload"))) is not None:
        errors.append(f'"payload" {why}')
    tz = entry.get("timezone")
    if tz is not None and not _is_zone(tz):
        errors.append(f'"timezone" is {tz!r}, not an IANA time zone such as "Europe/Paris"')
    queue = entry.get("queue")
    if queue is not None and (not isinstance(queue, str) or not queue):
        errors.append(f'"queue" is {queue!r}; expected a non-empty queue name')
    return errors


def _closest(word: object, choices: Iterable[str]) -> str:
    """' Did you mean "X"?' for the nearest choice (case-insensitive), or ""."""
    by_upper = {c.upper(): c for c in choices}
    found = difflib.get_close_matches(str(word).upper(), list(by_upper), n=1)
    return f' Did you mean "{by_upper[found[0]]}"?' if found else ""


def _kind(value: object) -> str:
    return type(value).__name__


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_names(value: object) -> bool:
    """A list or tuple of non-empty strings (a bare string is not)."""
    return isinstance(value, list | tuple) and all(isinstance(v, str) and v for v in value)


def _can_encode(name: object) -> bool:
    """Whether kombu has an encoder installed under ``name`` (yaml/msgpack may be missing)."""
    if not isinstance(name, str) or name not in registry.name_to_type:
        return False
    try:
        _dumps(None, serializer=name)
    except SerializerNotInstalled:
        return False
    except Exception:  # installed, but a custom encoder may refuse None: still usable
        return True
    return True


def _is_zone(name: object) -> bool:
    if not isinstance(name, str):
        return False
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return True


_SECONDS = f"seconds > 0 (at most {MAX_SECONDS:,})"
_SECONDS_0 = f"seconds >= 0 (at most {MAX_SECONDS:,})"
_COUNT_1 = f"an int from 1 to {MAX_INT:,}"
_COUNT_0 = f"an int from 0 to {MAX_INT:,}"

#: sqs options that are numbers: key -> (validates, what it should be); a failure is E012.
_SQS_NUMBERS: Mapping[str, tuple[Callable[[Any], bool], str]] = {
    "MAX_RECEIVE_COUNT": (lambda v: _is_int(v) and 1 <= v <= 1000, "an int from 1 to 1000"),
    "WAIT_TIME_SECONDS": (lambda v: _is_int(v) and 0 <= v <= 20, "an int from 0 to 20"),
    "SEND_GRACE": (lambda v: _is_number(v) and v > 0, "seconds > 0"),
}
_NUMERIC_OPTIONS = frozenset(_SQS_NUMBERS)

#: key -> (validates, what it should be); a failure is E012. Seconds and counts stop where the
#: API's arguments do (``validation.MAX_SECONDS``, ``MAX_INT``): every engine stores them.
_SCALARS: Mapping[str, tuple[Callable[[Any], bool], str]] = {
    "DEFAULT_LEASE": (lambda v: _is_number(v) and 0 < v <= MAX_SECONDS, _SECONDS),
    "DEFAULT_MAX_ATTEMPTS": (lambda v: _is_int(v) and 1 <= v <= MAX_INT, _COUNT_1),
    "MAX_STALLED_COUNT": (lambda v: _is_int(v) and 0 <= v <= MAX_INT, _COUNT_0),
    "BACKOFF_BASE": (lambda v: _is_number(v) and 0 <= v <= MAX_SECONDS, _SECONDS_0),
    "BACKOFF_MAX": (lambda v: _is_number(v) and 0 <= v <= MAX_SECONDS, _SECONDS_0),
    "BACKOFF_JITTER": (lambda v: isinstance(v, bool), "True or False"),
    "PROGRESS_THROTTLE": (lambda v: _is_number(v) and 0 <= v <= MAX_SECONDS, _SECONDS_0),
    "SWEEP_INTERVAL": (lambda v: _is_number(v) and 0 < v <= MAX_SECONDS, _SECONDS),
    "FLOW_SWEEP_INTERVAL": (lambda v: _is_number(v) and 0 < v <= MAX_SECONDS, _SECONDS),
    "SHUTDOWN_GRACE": (lambda v: _is_number(v) and 0 <= v <= MAX_SECONDS, _SECONDS_0),
    "MAX_FLOW_DEPTH": (lambda v: _is_int(v) and v >= 1, "an int >= 1"),
    "ORIGIN_SITE": (lambda v: isinstance(v, bool), "True or False"),
}
