"""Beat tasks as a shop writes them (the shapes of saleor's and paperless-ngx's periodic tasks,
re-written): most take no arguments, some a keyword with a default. A ``beat_schedule`` moved to
``SCHEDULES`` or ``@periodic`` calls each as written — never with a ``None`` that a default
would have replaced — and a nightly job does not pile up while no worker serves its queue."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import job, periodic
from django_blamequeue.jobs import registry
from django_blamequeue.models import Job, Schedule
from django_blamequeue.sweeper.scheduler import Scheduler
from django_blamequeue.testing import capture_jobs

pytestmark = pytest.mark.django_db(transaction=True)
T0 = datetime(2024, 3, 1, 0, 0, tzinfo=UTC)
ran: list[tuple[str, Any]] = []
NAMES = ("shop.tasks.update_search_vector", "shop.tasks.delete_expired_checkouts")


@pytest.fixture(autouse=True)
def tasks() -> Iterator[None]:
    ran.clear()

    @job(queue="periodic", name=NAMES[0])
    def update_search_vector() -> None:
        ran.append(("search_vector", None))

    @job(queue="periodic", name=NAMES[1])
    def delete_expired_checkouts(batch_size: int = 1000) -> int:
        # as the original: ``None < 1`` raises only after a whole unbounded batch was deleted
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        ran.append(("delete_expired", batch_size))
        return batch_size

    yield
    for name in (*NAMES, "docs.tasks.index_optimize"):
        registry.unregister(name)


def beat(settings: SettingsWrapper, entries: dict[str, Any]) -> None:
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "SCHEDULES": entries}


def test_a_beat_schedule_of_no_argument_tasks_runs_each_as_written(
    settings: SettingsWrapper,
) -> None:
    beat(
        settings,
        {
            "update-search-vector": {"job": NAMES[0], "interval": 20},
            "delete-expired-checkouts": {"job": NAMES[1], "cron": "0 * * * *"},
            "delete-expired-small": {
                "job": NAMES[1],
                "cron": "30 * * * *",
                "kwargs": {"batch_size": 50},
            },
        },
    )
    sched = Scheduler()
    sched.run_once(T0)  # anchored: each fires at its next occurrence
    with capture_jobs() as captured:
        assert sched.run_once(T0 + timedelta(hours=1))["fired"] == 3
        report = captured.run_jobs()
    assert sorted(ran) == [
        ("delete_expired", 50),
        ("delete_expired", 1000),  # its own default, not None
        ("search_vector", None),
    ]
    assert [a.state for a in report.attempts] == ["done"] * 3


def test_the_old_payload_workaround_on_a_no_argument_task_is_an_error_of_check(
    settings: SettingsWrapper,
) -> None:
    beat(settings, {"update-search-vector": {"job": NAMES[0], "interval": 20, "payload": {}}})
    with pytest.raises(SystemCheckError) as caught:
        call_command("check", stdout=StringIO(), stderr=StringIO())
    assert "blamequeue.E043" in str(caught.value)
    assert "update-search-vector" in str(caught.value)
    sched = Scheduler()
    sched.run_once(T0)
    assert sched.run_once(T0 + timedelta(minutes=1))["failed"] == 1
    assert not Job.objects.exists()  # never a run that dead-letters at night


def test_a_nightly_task_declared_in_code_does_not_pile_up_while_no_worker_runs_it() -> None:
    @periodic("30 2 * * *", timezone="Europe/Berlin")
    @job(queue="nightly", name="docs.tasks.index_optimize")
    def index_optimize() -> None:
        ran.append(("index_optimize", None))

    sched = Scheduler()
    sched.run_once(T0)
    with capture_jobs() as captured:
        nights = [sched.run_once(T0 + timedelta(days=d, hours=2)) for d in range(1, 10)]
        assert [n.get("fired", 0) for n in nights] == [1] + [0] * 8  # 9 nights, no worker
        assert Schedule.objects.get(name="docs.tasks.index_optimize").skipped == 8
        captured.run_jobs()
        assert ran == [("index_optimize", None)]  # once, not nine times back to back
        assert sched.run_once(T0 + timedelta(days=10, hours=2))["fired"] == 1
