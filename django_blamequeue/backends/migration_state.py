"""Whether a database holds this app's tables, migrated: the "run migrate" answer.

A project that added the app and forgot ``migrate`` (or upgraded it and forgot the new
migrations) should hear one sentence naming the fix, not a traceback per worker round. Three
places ask: the system check (``blamequeue.E040``), the commands before they start, and
``Resilience``, which turns an engine's "no such table" into ``QueueError(NOT_MIGRATED)``.

Looking never creates anything: an SQLite file that does not exist yet is answered as "not
migrated" without opening it (opening would create an empty file).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from pathlib import Path

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.db.utils import OperationalError, ProgrammingError

APP_LABEL = "django_blamequeue"
#: Every install has this table from the first migration on.
FIRST_TABLE = "blamequeue_job"
#: PostgreSQL's undefined_table and undefined_column.
_SQLSTATES = frozenset({"42P01", "42703"})
_SQLITE_WORDS = ("no such table: blamequeue_", "no such column", "has no column named")

FIX = "run `python manage.py migrate`"


@dataclass(frozen=True, slots=True)
class Unmigrated:
    """What ``database`` lacks: every table (``missing`` is all of them) or some migrations."""

    database: str
    missing: tuple[str, ...]
    no_tables: bool

    def sentence(self) -> str:
        if self.no_tables:
            what = "has no django_blamequeue tables yet"
        else:
            names = ", ".join(self.missing[:3]) + (" …" if len(self.missing) > 3 else "")
            what = f"lacks {len(self.missing)} django_blamequeue migration(s) ({names})"
        return f"database {self.database!r} {what}: {FIX}"


def migration_names() -> list[str]:
    """The app's migrations on disk (``MIGRATION_MODULES`` honoured), in name order."""
    module_name, _ = MigrationLoader.migrations_module(APP_LABEL)
    if module_name is None:
        return []
    module = importlib.import_module(module_name)
    return sorted(
        name
        for _, name, is_pkg in pkgutil.iter_modules(module.__path__)
        if not is_pkg and name[0] not in "_~"
    )


def unmigrated(database: str = DEFAULT_DB_ALIAS) -> Unmigrated | None:
    """What ``database`` lacks, or None when it is migrated. Raises what the database raises
    when it cannot be reached (callers decide whether that is worth a word)."""
    connection = connections[database]
    names = migration_names()
    if connection.vendor == "sqlite" and not _sqlite_file_exists(connection.settings_dict):
        return Unmigrated(database, tuple(names), no_tables=True)
    with connection.cursor() as cursor:
        tables = set(connection.introspection.table_names(cursor))
    if FIRST_TABLE not in tables:
        return Unmigrated(database, tuple(names), no_tables=True)
    recorder = MigrationRecorder(connection)
    if not recorder.has_table():
        return None  # tables made without migrations (``--nomigrations``): nothing to say
    applied = {name for app, name in recorder.applied_migrations() if app == APP_LABEL}
    if not applied:
        return None  # the same, recorded: the tables came from somewhere else
    missing = tuple(n for n in names if n not in applied)
    return Unmigrated(database, missing, no_tables=False) if missing else None


def _sqlite_file_exists(settings_dict: dict[str, object]) -> bool:
    name = str(settings_dict.get("NAME") or "")
    if not name or name == ":memory:" or name.startswith("file:"):
        return True  # in memory, or a URI (the test databases): nothing to create on disk
    return Path(name).exists()


def is_missing_schema(exc: BaseException) -> bool:
    """``exc`` says a table or column of this app is missing: ``migrate`` fixes it."""
    if not isinstance(exc, OperationalError | ProgrammingError):
        return False
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) in _SQLSTATES or getattr(cause, "pgcode", None) in (
        _SQLSTATES
    ):
        return True
    text = str(exc)
    return any(word in text for word in _SQLITE_WORDS)
