"""The regression tests: every refusal is a ``QueueError`` (or a ``CommandError``) and
leaves every table as it was; the ``backend`` fixture runs a test on SQLite and PostgreSQL."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings

from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.models import AuditEvent, FlowDependency, Job, OutboxEntry, Schedule

#: Every table a refused call could have written to.
TABLES = (Job, FlowDependency, OutboxEntry, AuditEvent, Schedule)


def database_of(backend: str) -> str:
    return str(settings.BLAMEQUEUE["BACKENDS"][backend].get("DATABASE", "default"))


def tables(backend: str = "default") -> dict[str, int]:
    """Row counts of the job tables in ``backend``'s database: "nothing written" compares two."""
    db = database_of(backend)
    return {model.__name__: model.objects.using(db).count() for model in TABLES}


def refused(backend: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> ErrorCode:
    """Run ``call(*args, backend=backend, **kwargs)``; it must raise ``QueueError`` and write
    nothing to the backend's database. Answers the code."""
    before = tables(backend)
    try:
        call(*args, backend=backend, **kwargs)
    except QueueError as exc:
        assert tables(backend) == before, f"{call.__name__}{args!r:.60}: wrote, then refused"
        return exc.code
    pytest.fail(f"{call.__name__}{args!r:.60} {kwargs!r:.60}: accepted, not refused")


#: The fuzz suite's outcomes: (property, backend) → outcome ("ok" or an error code) → count.
FIGURES: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)


def record(prop: str, backend: str, outcome: str) -> None:
    FIGURES[(prop, backend)][outcome] += 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The fuzz figures, so a run shows how much was accepted and refused, and why."""
    if not FIGURES:
        return
    terminalreporter.section("blamequeue fuzz figures")
    for (prop, backend), counts in sorted(FIGURES.items()):
        total = sum(counts.values())
        parts = ", ".join(f"{name} {n}" for name, n in counts.most_common())
        terminalreporter.write_line(f"{prop:<13} {backend:<9} {total:>4} calls: {parts}")
