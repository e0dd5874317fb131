"""Validation of a raw ``BLAMEQUEUE`` mapping into a list of problems (ids in docs/checks.md).

Kept apart from ``conf`` to keep that module readable. A function of its inputs (and of the
engine class an entry's ``BACKEND`` names, which it imports): ``conf`` passes the raw dict,
``DATABASES`` and ``CACHES``, so the system check and the runtime refusal run the same code and
can never disagree. What each protocol allows comes from the table of backends (``engines``).
Ids are never renumbered or reused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kombu.serialization import registry

from django_blamequeue.conf.engines import (
    AVAILABLE,
    BASE,
    ENGINES,
    Engine,
    engine_class,
    row_of,
)
from django_blamequeue.conf.schema import (
    AUDIT_LEVELS,
    QUEUE_KEYS,
    RETENTION_KEYS,
    SETTINGS_WHERE,
    TOP_KEYS,
    UNSAFE_CONTENT,
    Findings,
    Problem,
    Where,
    content_type_of,
)
from django_blamequeue.conf.values import (
    COUNT_1,
    RATE,
    SCALARS,
    can_encode,
    closest,
    is_int,
    is_names,
    is_number,
    kind,
    route_errors,
    schedule_errors,
)
from django_blamequeue.core.validation import limits
from django_blamequeue.exceptions import QueueError

__all__ = ["validate"]


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
    validator.queues(raw.get("QUEUES", {}))
    validator.routes(raw.get("ROUTES", {}))
    return validator.found


_HINT_TOP = 'Set BLAMEQUEUE = {"BACKENDS": {"default": {"PROTOCOL": "local"}}} or remove it.'
_HINT_PROTOCOL = "Use one of: " + ", ".join(AVAILABLE) + "."
_HINT_ENGINE = f"Name a subclass of {BASE}, or choose a PROTOCOL."
_HINT_SCHEDULE = (
    'A schedule is {"job": "app.jobs.name", "cron": "*/5 * * * *"} or {"job": ..., '
    '"interval": 300}, with optional "timezone", "payload" (or "args" and "kwargs"), "queue", '
    '"overlap" ("skip" or "allow") and "expires" (seconds).'
)


class _Validator(Findings):
    """Collects problems; one method per settings area, each reading only its own keys."""

    def unknown_keys(
        self, raw: Mapping[Any, Any], known: Sequence[str], *at: str, of: str = ""
    ) -> None:
        for key in raw:
            if key not in known:
                message = f"{self.where(*at, key)} is not a known key{of}.{closest(key, known)}"
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
                message = f"{self.where('BACKENDS', alias)} must be a dict, not {kind(entry)}"
                self.add("E012", message, 'For example {"PROTOCOL": "local"}.')
            else:
                self.backend(("BACKENDS", alias), entry)
        default = raw.get("DEFAULT_BACKEND", "default")
        if not isinstance(default, str) or default not in backends:
            message = f"{self.where('DEFAULT_BACKEND')} is {default!r}, not an entry of BACKENDS"
            self.add("E002", message, "Use one of: " + ", ".join(map(str, backends)) + ".")

    def backend(self, at: tuple[str, str], entry: Mapping[str, Any]) -> None:
        if "BACKEND" in entry:
            self.engine(at, entry)
            return
        protocol, where = entry.get("PROTOCOL"), self.where
        row = ENGINES.get(protocol) if isinstance(protocol, str) else None
        if row is not None and not row.available:
            what = f"{row.label} is not available"
            self.add("E004", f"{where(*at, 'PROTOCOL')} is {protocol!r}: {what}", _HINT_PROTOCOL)
        elif row is None:
            what = "is missing" if protocol is None else f"is {protocol!r}, not a known protocol"
            message = f"{where(*at, 'PROTOCOL')} {what}."
            self.add("E003", message + closest(protocol, AVAILABLE), _HINT_PROTOCOL)
        else:
            self.options(at, entry, row, "PROTOCOL")

    def engine(self, at: tuple[str, str], entry: Mapping[str, Any]) -> None:
        """E014: ``BACKEND`` names an engine class (and no PROTOCOL beside it)."""
        if "PROTOCOL" in entry:
            message = (
                f"{self.where(*at)} sets both PROTOCOL and BACKEND; it is unclear which to use"
            )
            self.add("E014", message, "Keep one of them.")
            return
        found = engine_class(entry["BACKEND"])
        if isinstance(found, str):
            self.add("E014", f"{self.where(*at, 'BACKEND')} {found}", _HINT_ENGINE)
        elif (row := row_of(found)) is not None:
            self.options(at, entry, row, "BACKEND")
        else:  # a protocol of its own: the engine reads its options
            self.queue_names(at, entry)

    def options(self, at: tuple[str, str], entry: Mapping[str, Any], row: Engine, key: str) -> None:
        """The options of an entry of ``row``'s protocol (``key`` chose it): known, of their
        kinds, then the protocol's own checks."""
        defaults, where = row.defaults, self.where
        self.unknown_keys(entry, (key, "QUEUES", *defaults), *at, of=f" for {row.name}")
        options = {**defaults, **{k: v for k, v in entry.items() if k in defaults}}
        for name, value in options.items():
            if name in row.numbers:
                continue  # checked with their ranges after the protocol's checks
            wanted = bool if name in row.flags else str
            if not (isinstance(value, wanted) or (value is None and defaults[name] is None)):
                self.add("E012", f"{where(*at, name)} is {value!r}; expected a {wanted.__name__}")
        self.queue_names(at, entry)
        if row.check is not None:
            row.check(self, at, options)
        for name, (valid, expected) in row.numbers.items():
            if not valid(options[name]):
                self.add("E012", f"{where(*at, name)} is {options[name]!r}; expected {expected}")

    def queue_names(self, at: tuple[str, str], entry: Mapping[str, Any]) -> None:
        queues = entry.get("QUEUES")
        if queues is not None and not is_names(queues):
            message = f"{self.where(*at, 'QUEUES')} is {queues!r}; expected a list of queue names"
            self.add("E012", message, "Omit QUEUES to allow any queue name.")

    def content(self, raw: Mapping[str, Any]) -> None:
        accept, where = raw.get("ACCEPT_CONTENT", ["json"]), self.where
        if not is_names(accept) or not accept:
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
        if not can_encode(serializer):
            message = f"{where('SERIALIZER')} is {serializer!r}, which kombu cannot encode with"
            self.add("E008", message, "Use a kombu serializer name such as 'json'.")
        elif registry.name_to_type[serializer] not in types:
            message = f"{where('SERIALIZER')} is {serializer!r}, which ACCEPT_CONTENT refuses"
            self.add("E008", message, f"Add {serializer!r} to ACCEPT_CONTENT.")

    def scalars(self, raw: Mapping[str, Any]) -> None:
        size = raw.get("MAX_PAYLOAD_BYTES", 1)
        if not is_int(size) or size <= 0:
            message = f"{self.where('MAX_PAYLOAD_BYTES')} is {size!r}; expected a positive int"
            self.add("E009", message, "It counts bytes; the default is 1048576 (1 MiB).")
        audit = raw.get("AUDIT", "operations")
        if audit not in AUDIT_LEVELS:
            message = f"{self.where('AUDIT')} is {audit!r}; expected one of all, operations, off"
            self.add("E010", message, 'The default is "operations".')
        for key, (valid, expected) in SCALARS.items():
            if key in raw and not valid(raw[key]):
                self.add("E012", f"{self.where(key)} is {raw[key]!r}; expected {expected}")
        base, top = raw.get("BACKOFF_BASE", 1.0), raw.get("BACKOFF_MAX", 300.0)
        if is_number(base) and is_number(top) and top < base:
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
            if value is not None and not (is_number(value) and value > 0):
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
                self.add("E011", f"{at} must be a dict, not {kind(entry)}", _HINT_SCHEDULE)
            else:
                for why in schedule_errors(entry):
                    self.add("E011", f"{at}: {why}", _HINT_SCHEDULE)

    def routes(self, routes: object) -> None:
        """E042: ``ROUTES`` maps job names or globs to queues (Celery's ``task_routes``)."""
        hint = 'For example {"shop.webhooks.*": "webhooks", "shop.jobs.send_email": "emails"}.'
        for why in route_errors(routes):
            self.add("E042", f"{self.where('ROUTES')} {why}", hint)

    def queues(self, queues: object) -> None:
        """E013: ``QUEUES`` maps queue names to their default limits."""
        hint = (
            'For example {"emails": {"CONCURRENCY": 10, "KEY_CONCURRENCY": 1, '
            '"RATE_LIMIT": (100, 60), "KEY_RATE_LIMIT": (5, 1), '
            '"KEY_WEIGHTS": {"enterprise:*": 5}}}.'
        )
        if not isinstance(queues, Mapping):
            self.add("E013", f"{self.where('QUEUES')} is {queues!r}; expected a dict", hint)
            return
        for name, entry in queues.items():
            at = self.where("QUEUES", name)
            if not isinstance(name, str) or not name.strip():
                self.add("E013", f"{at}: a queue name must be a non-empty str", hint)
            elif not isinstance(entry, Mapping):
                self.add("E013", f"{at} must be a dict, not {kind(entry)}", hint)
            else:
                for key in entry:
                    if key not in QUEUE_KEYS:
                        why = f"{key!r} is not a queue key.{closest(key, QUEUE_KEYS)}"
                        self.add("E013", f"{at}: {why}", "Known keys: " + ", ".join(QUEUE_KEYS))
                for key in QUEUE_KEYS:
                    try:
                        limits(**{key.lower(): entry.get(key)})
                    except QueueError as exc:
                        if key == "KEY_WEIGHTS":
                            self.add("E013", f'{at}["{key}"]: {exc.message}', hint)
                            continue
                        expected = RATE if key.endswith("RATE_LIMIT") else COUNT_1
                        message = f'{at}["{key}"] is {entry[key]!r}; expected {expected} or None'
                        self.add("E013", message, hint)
