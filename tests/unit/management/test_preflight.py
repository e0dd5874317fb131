"""After an upgrade whose migrations did not run, the commands name ``migrate`` in one line,
and the engine's "no such table" becomes ``QueueError(NOT_MIGRATED)``."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder
from django.db.utils import OperationalError, ProgrammingError

from django_blamequeue.backends import migration_state
from django_blamequeue.management.preflight import require_migrated

pytestmark = pytest.mark.django_db  # the recorder's rows change inside the test's transaction


def test_a_migration_that_did_not_run_stops_each_command_with_one_line_naming_it() -> None:
    last = migration_state.migration_names()[-1]
    MigrationRecorder(connection).record_unapplied(migration_state.APP_LABEL, last)
    expected = (
        f"database 'default' lacks 1 django_blamequeue migration(s) ({last}): "
        "run `python manage.py migrate`"
    )
    for args in (["runworker", "--burst"], ["runsweeper", "--once"], ["blamequeue", "stats"]):
        with pytest.raises(CommandError) as caught:
            call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
        assert str(caught.value) == expected
    with pytest.raises(CommandError):
        require_migrated()


def test_a_migrated_database_has_nothing_to_say() -> None:
    assert migration_state.unmigrated("default") is None
    require_migrated()


def test_missing_tables_and_columns_are_told_apart_from_other_errors() -> None:
    with pytest.raises((OperationalError, ProgrammingError)) as missing, connection.cursor() as c:
        c.execute("SELECT id FROM blamequeue_no_such_table")
    assert migration_state.is_missing_schema(missing.value)
    assert not migration_state.is_missing_schema(OperationalError("database is locked"))
    assert not migration_state.is_missing_schema(ValueError("no such table: blamequeue_job"))
