"""The words ``runworker`` prints about itself that need no running worker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from django_blamequeue.backends import get_backend
from django_blamequeue.core.records import Backlog
from django_blamequeue.management import banner


def test_the_mode_says_what_ends_the_worker() -> None:
    assert banner.mode(SimpleNamespace(burst=False, wait_delayed=False)) == "run until signalled"
    assert banner.mode(SimpleNamespace(burst=True, wait_delayed=False)) == (
        "burst (exit when nothing is due)"
    )
    assert banner.mode(SimpleNamespace(burst=True, wait_delayed=True)) == (
        "burst (exit when empty, delayed jobs included)"
    )


def test_a_burst_names_the_delayed_jobs_it_leaves_and_when_the_next_is_due() -> None:
    due = datetime.now(UTC) + timedelta(seconds=5)
    text = banner.delayed_left(Backlog(delayed=1200, next_due_at=due))
    assert text.startswith("1,200 delayed job(s) left; the next is due in ")
    assert f"({due:%Y-%m-%d %H:%M:%S} UTC)" in text and text.endswith(
        "--wait-delayed waits for them"
    )


@pytest.mark.django_db
def test_a_backend_is_named_with_the_database_that_holds_its_jobs() -> None:
    assert banner.database_of(get_backend("default")) == ", database default"
    assert banner.database_of(SimpleNamespace(database=None)) == ""  # type: ignore[arg-type]
