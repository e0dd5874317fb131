"""The table of backends: every protocol a ``BACKENDS`` entry may name, described once.

A row holds what the settings know about a protocol: its engine class by dotted path (as Django
names its database backends), the options an entry may give with their defaults and kinds, the
``BLAMEQUEUE_*`` variables of the environment boot, and the checks of its options. A protocol
known but not shipped has only its name and label: choosing it is refused (E004,
``PROTOCOL_UNAVAILABLE``). ``conf`` builds and validates settings from the table,
``backends.get_backend`` builds engines from it, and the test suite's fixtures read it. The
engine is imported only when a backend is built: ``conf`` sits below the engines and never
imports one.

An entry may name an engine class itself, ``{"BACKEND": "dotted.path.Class"}``
(docs/writing-a-backend.md). Its class's ``protocol`` picks the row whose options, defaults and
checks apply, so a subclass of the local backend is configured as one; an engine whose protocol
has no row here reads its options as written.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.utils.module_loading import import_string

from django_blamequeue.conf.schema import Findings
from django_blamequeue.conf.values import is_int, is_number
from django_blamequeue.exceptions import ErrorCode, QueueError

__all__ = ["AVAILABLE", "BACKEND_DEFAULTS", "BASE", "ENGINES", "Engine", "engine_class", "row_of"]

#: A check of one protocol's options: ``check(findings, ("BACKENDS", alias), options)``.
Check = Callable[[Findings, tuple[str, str], Mapping[str, Any]], None]
#: An option that is a number: (validates, what it should be); a failure is E012.
Number = tuple[Callable[[Any], bool], str]

#: The class every engine subclasses. Named, not imported: ``conf`` is below the backends.
BASE = "django_blamequeue.backends.base.Backend"


@dataclass(frozen=True, slots=True, kw_only=True)
class Engine:
    """One protocol. An option not in ``flags`` or ``numbers`` is a str (or None where its
    default is None)."""

    name: str  # what PROTOCOL says
    label: str  # what messages call it
    #: The ``Backend`` subclass, by dotted path; None: known but not available here.
    path: str | None = None
    #: The options an entry may give besides PROTOCOL and QUEUES, with their defaults.
    defaults: Mapping[str, Any] = field(default_factory=dict)
    flags: frozenset[str] = (
        frozenset()
    )  # options that are bools (or None where that is the default)
    numbers: Mapping[str, Number] = field(default_factory=dict)
    #: The environment boot: ``BLAMEQUEUE_*`` variable -> option (docs/operations.md).
    environment: Mapping[str, str] = field(default_factory=dict)
    #: Its own checks of the options, after their kinds (E005-E007, W002, E012).
    check: Check | None = None
    #: The pip extra that installs the engine's client libraries, named when one is missing.
    extra: str | None = None

    @property
    def available(self) -> bool:
        return self.path is not None

    def missing(self, alias: str, module: str) -> QueueError:
        """Backend ``alias`` cannot be built: its client library ``module`` is not installed."""
        return QueueError(
            ErrorCode.INVALID_CONFIG,
            f"backend {alias!r} ({self.label}) needs the {module!r} package: "
            f"pip install 'django-blamequeue[{self.extra}]'",
        )

    def refusal(self, alias: str) -> QueueError:
        """Why backend ``alias`` of this protocol cannot be built (it is not available)."""
        return QueueError(
            ErrorCode.PROTOCOL_UNAVAILABLE,
            f"backend {alias!r}: protocol {self.name!r} ({self.label}) is known but not "
            f"available in django-blamequeue; use {_either(AVAILABLE)}",
        )


def _either(names: tuple[str, ...]) -> str:
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else "".join(names)


# -- the checks of each protocol's options -----------------------------------------------------
def _local(found: Findings, at: tuple[str, str], options: Mapping[str, Any]) -> None:
    """E005: DATABASE names a database; W002: an SQLite one takes its write lock up front."""
    alias = options["DATABASE"]
    if alias not in found.databases:
        message = f"{found.where(*at, 'DATABASE')} is {alias!r}, not an entry of DATABASES"
        found.add("E005", message, "Use one of: " + ", ".join(found.databases) + ".")
        return
    db = found.databases[alias]
    engine = str(db.get("ENGINE", ""))
    mode = str((db.get("OPTIONS") or {}).get("transaction_mode") or "")
    if ("sqlite" in engine or "spatialite" in engine) and mode.upper() != "IMMEDIATE":
        origin = found.where(*at)
        if found.implied:
            origin = 'the backend "default" of a BLAMEQUEUE without "BACKENDS"'
        message = (
            f"{origin[0].upper()}{origin[1:]} stores jobs in the SQLite database {alias!r}, "
            'whose OPTIONS lack "transaction_mode": "IMMEDIATE"; concurrent workers will hit '
            '"database is locked"'
        )
        hint = f'Add "OPTIONS": {{"transaction_mode": "IMMEDIATE"}} to DATABASES[{alias!r}].'
        found.add("W002", message, hint, "warning")


def _redis(found: Findings, at: tuple[str, str], options: Mapping[str, Any]) -> None:
    """E006: one way to connect, a django-redis cache or a redis:// URL."""
    connection, url, where = options["CONNECTION"], options["URL"], found.where
    if connection is not None and url is not None:
        message = f"{where(*at)} sets both CONNECTION and URL; it is unclear which to use"
        found.add("E006", message, "Keep one of them.")
    elif connection is not None and options.get("CLUSTER"):
        message = f"{where(*at, 'CLUSTER')} is set with CONNECTION; a cluster is reached by URL"
        hint = 'Give "URL" (any node of the cluster: the client finds the rest) instead.'
        found.add("E006", message, hint)
    elif connection is not None:
        backend = str((found.caches.get(connection) or {}).get("BACKEND", ""))
        if connection not in found.caches or "redis" not in backend.lower():
            what = "no entry" if connection not in found.caches else f"a non-Redis {backend}"
            message = f"{where(*at, 'CONNECTION')} is {connection!r}: {what} of CACHES"
            found.add("E006", message, "Name a django-redis entry of CACHES, or give a URL.")
    elif options.get("CLUSTER") and url is not None and url.startswith("unix://"):
        message = f"{where(*at, 'URL')} is {url!r}; a cluster's nodes are reached over TCP"
        found.add("E006", message, "Give a redis:// or rediss:// URL of any node.")
    elif url is None or not re.match(r"(redis|rediss|unix)://", url):
        what = "is missing" if url is None else f"is {url!r}, not a redis:// URL"
        message = f"{where(*at, 'URL')} {what}; a redis backend needs a URL or a CONNECTION"
        example = "e.g. redis://localhost:6379/0 (rediss:// for TLS)"
        hint = f'Set "URL" ({example}), or "CONNECTION" to a django-redis alias of CACHES.'
        if where.environment:
            hint = f"Set {where(*at, 'URL')} ({example})."
        found.add("E006", message, hint)


def _sqs(found: Findings, at: tuple[str, str], options: Mapping[str, Any]) -> None:
    """E007: a region; E012: names SQS accepts, an http(s) endpoint."""
    where = found.where
    if not options["REGION"]:
        message = f"{where(*at, 'REGION')} is missing; an sqs backend needs an AWS region"
        found.add("E007", message, f"Set {where(*at, 'REGION')}, e.g. to 'eu-west-1'.")
    prefix = options["QUEUE_PREFIX"]
    if isinstance(prefix, str) and not re.fullmatch(r"[A-Za-z0-9_-]*", prefix):
        message = f"{where(*at, 'QUEUE_PREFIX')} is {prefix!r}; SQS allows A-Z a-z 0-9 - _"
        found.add("E012", message)
    elif isinstance(prefix, str) and len(prefix) > 40:
        message = f"{where(*at, 'QUEUE_PREFIX')} has {len(prefix)} characters; at most 40"
        found.add("E012", message, "SQS queue names have 80 characters, the prefix included.")
    endpoint = options["ENDPOINT_URL"]
    if isinstance(endpoint, str) and not re.match(r"https?://", endpoint):
        message = f"{where(*at, 'ENDPOINT_URL')} is {endpoint!r}; expected an http(s):// URL"
        found.add("E012", message)


# -- the table ---------------------------------------------------------------------------------
_ROWS = (
    Engine(
        name="local",
        label="a Django database",
        path="django_blamequeue.backends.database.DatabaseBackend",
        # PREPARE: the hot statements prepared on PostgreSQL (None: unless the database is set
        # up for a transaction-mode pooler; backends/jobtable/prepared.py).
        # CLAIM_ONWARD_AFTER_MS: a PostgreSQL claim from the start of the queue slower than
        # this makes the next ones start after the last job claimed (None: never;
        # backends/jobtable/claim_start.py).
        defaults={
            "DATABASE": "default",
            "LISTEN": True,
            "PREPARE": None,
            "CLAIM_ONWARD_AFTER_MS": 5.0,
        },
        flags=frozenset({"LISTEN", "PREPARE"}),
        numbers={
            "CLAIM_ONWARD_AFTER_MS": (
                lambda v: v is None or (is_number(v) and 0 <= v <= 60_000),
                "None or milliseconds from 0 to 60,000",
            )
        },
        check=_local,
    ),
    Engine(
        name="redis",
        label="Redis",
        path="django_blamequeue.backends.redis.RedisBackend",
        defaults={
            "CONNECTION": None,
            "URL": None,
            "PASSWORD": None,
            "USERNAME": None,
            "TLS": False,
            "CLUSTER": False,  # URL is one node of a Redis Cluster (redis-py's RedisCluster)
            "KEY_PREFIX": "blamequeue",
            "DATABASE": "default",  # the Django database of its outbox and audit rows
        },
        flags=frozenset({"TLS", "CLUSTER"}),
        environment={
            "BLAMEQUEUE_REDIS_URL": "URL",
            "BLAMEQUEUE_REDIS_CLUSTER": "CLUSTER",
            "BLAMEQUEUE_REDIS_PASSWORD": "PASSWORD",
            "BLAMEQUEUE_REDIS_USERNAME": "USERNAME",
            "BLAMEQUEUE_REDIS_TLS": "TLS",
            "BLAMEQUEUE_REDIS_KEY_PREFIX": "KEY_PREFIX",
        },
        check=_redis,
        extra="redis",
    ),
    Engine(
        name="sqs",
        label="Amazon SQS",
        path="django_blamequeue.backends.sqs.SqsBackend",
        defaults={
            "DATABASE": "default",  # the Django database that holds the job records (ledger)
            "PREPARE": None,  # as the local backend's
            "REGION": None,
            "ENDPOINT_URL": None,
            "QUEUE_PREFIX": "",
            "ACCESS_KEY_ID": None,
            "SECRET_ACCESS_KEY": None,
            "MAX_RECEIVE_COUNT": 10,  # the RedrivePolicy of queues it creates (poison messages)
            "WAIT_TIME_SECONDS": 0,  # ReceiveMessage long polling; it blocks a worker's loop
            "SEND_GRACE": 30.0,  # seconds before the send step re-sends a message never marked sent
        },
        flags=frozenset({"PREPARE"}),
        numbers={
            "MAX_RECEIVE_COUNT": (lambda v: is_int(v) and 1 <= v <= 1000, "an int from 1 to 1000"),
            "WAIT_TIME_SECONDS": (lambda v: is_int(v) and 0 <= v <= 20, "an int from 0 to 20"),
            "SEND_GRACE": (lambda v: is_number(v) and v > 0, "seconds > 0"),
        },
        environment={
            "BLAMEQUEUE_SQS_REGION": "REGION",
            "BLAMEQUEUE_SQS_ENDPOINT_URL": "ENDPOINT_URL",
            "BLAMEQUEUE_SQS_QUEUE_PREFIX": "QUEUE_PREFIX",
        },
        check=_sqs,
        extra="sqs",
    ),
    Engine(name="amqp", label="AMQP 0-9-1 (RabbitMQ etc.)"),
    Engine(name="nats", label="NATS JetStream"),
)
ENGINES: Mapping[str, Engine] = {row.name: row for row in _ROWS}
#: The protocols a ``PROTOCOL`` may choose, in the order messages list them.
AVAILABLE = tuple(row.name for row in _ROWS if row.available)
BACKEND_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    row.name: row.defaults for row in _ROWS if row.available
}


# -- engines named by BACKEND ------------------------------------------------------------------
def engine_class(path: object) -> type | str:
    """The class a ``BACKEND`` value names, or what is wrong with it (E014's words).

    Importing it is the user's module's own doing. Whether it is a ``Backend`` is asked of its
    MRO by name, so ``conf`` imports nothing of ``backends`` itself.
    """
    if not isinstance(path, str) or "." not in path:
        return f"is {path!r}; expected the dotted path of a {BASE} subclass"
    try:
        found = import_string(path)
    except Exception as exc:  # ImportError, or whatever the module raised as it ran
        return f"is {path!r}, which cannot be imported: {type(exc).__name__}: {exc}"
    if not isinstance(found, type) or BASE not in {_dotted(c) for c in found.__mro__}:
        return f"is {path!r}, which is not a subclass of {BASE}"
    if missing := sorted(getattr(found, "__abstractmethods__", ())):
        return f"is {path!r}, which does not implement {', '.join(missing)}"
    return found


def _dotted(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def row_of(engine: type) -> Engine | None:
    """The row whose options, defaults and checks apply to an entry naming ``engine``: its
    protocol's, if that is available here, else None (its options are read as written)."""
    row = ENGINES.get(str(getattr(engine, "protocol", "")))
    return row if row is not None and row.available else None
