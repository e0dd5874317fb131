"""Before ``migrate``: every command says so in one line that names the fix; ``migrate`` runs."""

from __future__ import annotations

from tests.first_run.conftest import Shell

FIX = "run `python manage.py migrate`"
NO_TABLES = f"database 'default' has no django_blamequeue tables yet: {FIX}"


def test_check_reports_e040_naming_migrate(manage: Shell) -> None:
    """(``migrate`` itself is not stopped by it: the quickstart from the wheel runs it.)"""
    before = manage("check")
    assert before.returncode == 1
    assert f"(blamequeue.E040) {NO_TABLES}" in before.output, before.output


def test_a_worker_before_migrate_says_one_thing_and_no_traceback(manage: Shell) -> None:
    ran = manage("runworker", "--burst")
    assert ran.returncode == 1
    assert f"(blamequeue.E040) {NO_TABLES}" in ran.output
    assert "Traceback" not in ran.output and "circuit" not in ran.output, ran.output
    skipped = manage("runworker", "--burst", "--skip-checks")  # the command's own look
    assert skipped.returncode == 1
    assert skipped.stderr.strip() == f"CommandError: {NO_TABLES}", skipped.output


def test_the_operator_commands_and_the_api_name_migrate_too(manage: Shell) -> None:
    code = """
from django.core.management import call_command
from django.core.management.base import CommandError
from django_blamequeue import queue, QueueError
for args in (["blamequeue", "stats"], ["blamequeue", "enqueue", "demo.jobs.send_email",
             "--payload", "{}"], ["runsweeper", "--once"]):
    try:
        call_command(*args)
    except CommandError as exc:
        print(args[-1] if args[0] == "runsweeper" else args[1], "->", exc)
try:
    queue.enqueue("emails", {"to": "a@example.com"}, name="demo.jobs.send_email")
except QueueError as exc:
    print("enqueue ->", exc.code, exc.message.rsplit(": ", 1)[-1])
"""
    ran = manage(code=code)
    assert ran.returncode == 0, ran.output
    lines = ran.stdout.splitlines()
    assert lines == [
        f"stats -> {NO_TABLES}",
        f"enqueue -> {NO_TABLES}",
        f"--once -> {NO_TABLES}",
        f"enqueue -> NOT_MIGRATED {FIX}",
    ], ran.output


def test_the_commands_that_come_before_migrate_are_not_stopped_by_it(manage: Shell) -> None:
    """A new user runs ``makemigrations`` for their own app, or looks at ``showmigrations``,
    before ``migrate``: E040 must not stand in their way (only ``check`` and ours report it)."""
    made = manage("makemigrations", "--check", "--dry-run")
    assert made.returncode == 0 and "E040" not in made.output, made.output
    shown = manage("showmigrations", "django_blamequeue")
    assert shown.returncode == 0 and " [ ] 0001_initial" in shown.stdout, shown.output
