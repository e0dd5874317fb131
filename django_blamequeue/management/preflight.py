"""What every command checks before it touches a queue: the tables exist (``migrate`` ran).

Django runs ``blamequeue.E040`` before a command started from the shell; this is the same
question for ``call_command`` and ``--skip-checks``, answered in one line instead of a
traceback per worker round.
"""

from __future__ import annotations

from django.core.management.base import CommandError

from django_blamequeue.checks import check_migrated


def require_migrated() -> None:
    """Raise ``CommandError`` naming ``migrate`` when a database of the jobs is not migrated."""
    lacking = [m.msg for m in check_migrated(None) if m.is_serious()]
    if lacking:
        raise CommandError("; ".join(lacking))
