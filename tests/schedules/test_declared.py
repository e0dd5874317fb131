"""Schedules call handlers as they are written (docs/schedules.md): no payload calls a
handler that needs no argument with none, ``args``/``kwargs`` make a call; periodic jobs are
declared in code (``@job(schedule=...)``, ``@periodic``), mirrored into the table beside the
``SCHEDULES`` ones; and a schedule whose call cannot bind is an error of ``manage.py check``
(``blamequeue.E043``), refused where it is declared and never fired."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import QueueError, job, periodic
from django_blamequeue.checks import check_schedule_calls
from django_blamequeue.exceptions import ErrorCode
from django_blamequeue.jobs import registry, schedules
from django_blamequeue.models import Job, Schedule
from django_blamequeue.sweeper.scheduler import Scheduler
from django_blamequeue.testing import capture_jobs

pytestmark = pytest.mark.django_db(transaction=True)
T0 = datetime(2024, 1, 1, 9, tzinfo=UTC)
calls: list[tuple[str, Any]] = []


@pytest.fixture(autouse=True)
def declared() -> Iterator[None]:
    """Jobs as a project would write them: beat tasks that take no arguments, or keywords."""
    calls.clear()

    @job(queue="beat", name="tests.beat.refresh", schedule="*/5 * * * *")
    def refresh() -> None:
        calls.append(("refresh", None))

    @periodic("0 3 * * *", timezone="Europe/Berlin", kwargs={"batch_size": 100})
    @job(queue="beat", name="tests.beat.delete_expired")
    def delete_expired(batch_size: int = 500) -> int:
        calls.append(("delete_expired", batch_size))
        return batch_size

    @job(queue="beat", name="tests.beat.report")
    def report(payload: Any) -> None:
        calls.append(("report", payload))

    yield
    for name in ("refresh", "delete_expired", "report"):
        registry.unregister(f"tests.beat.{name}")


def rows() -> dict[str, Schedule]:
    return {s.name: s for s in Schedule.objects.all()}


def test_declared_schedules_are_mirrored_into_the_table_as_code() -> None:
    assert sorted(schedules.declared()[1]) == ["tests.beat.delete_expired", "tests.beat.refresh"]
    Scheduler().run_once(T0)
    found = rows()
    refresh, delete = found["tests.beat.refresh"], found["tests.beat.delete_expired"]
    assert (refresh.source, refresh.cron, refresh.payload, refresh.overlap) == (
        "code",
        "*/5 * * * *",
        None,
        "skip",
    )
    assert (delete.source, delete.timezone, delete.payload) == (
        "code",
        "Europe/Berlin",
        {"__args__": [], "__kwargs__": {"batch_size": 100}},
    )


def test_fired_schedules_run_their_handlers_as_written() -> None:
    sched = Scheduler()
    sched.run_once(T0)
    with capture_jobs() as captured:
        assert sched.run_once(T0 + timedelta(minutes=5))["fired"] == 1  # refresh
        first = captured.run_jobs()  # done: the next refresh may fire (overlap="skip")
        assert sched.run_once(datetime(2024, 1, 2, 2, 0, tzinfo=UTC))["fired"] == 2  # 03:00 CET
        second = captured.run_jobs()
    assert sorted(calls) == [("delete_expired", 100), ("refresh", None), ("refresh", None)]
    assert [a.state for a in first.attempts + second.attempts] == ["done"] * 3


def test_a_schedules_entry_gives_args_or_kwargs_and_replaces_a_declared_one(
    settings: SettingsWrapper,
) -> None:
    settings.BLAMEQUEUE = {
        **settings.BLAMEQUEUE,
        "SCHEDULES": {
            "tests.beat.delete_expired": {
                "job": "tests.beat.delete_expired",
                "cron": "0 4 * * *",
                "args": [10],
            },
            "hourly-report": {"job": "tests.beat.report", "interval": 3600, "payload": {"k": 1}},
        },
    }
    sched = Scheduler()
    sched.run_once(T0)
    found = rows()
    assert found["tests.beat.delete_expired"].source == "settings"
    assert found["tests.beat.delete_expired"].payload == {"__args__": [10], "__kwargs__": {}}
    assert "tests.beat.refresh" in found  # the other declaration stays
    with capture_jobs() as captured:
        sched.run_once(T0 + timedelta(hours=1))
        captured.run_jobs()
    assert ("report", {"k": 1}) in calls


@pytest.mark.parametrize(
    ("declare", "problem"),
    [
        (dict(args=[1, 2]), "too many positional arguments"),
        (dict(kwargs={"size": 5}), "unexpected keyword argument 'size'"),
        (dict(payload={"a": 1}, args=[1]), "not both"),
        (dict(overlap="queue"), "\"overlap\" is 'queue'"),
    ],
)
def test_a_declaration_whose_call_cannot_bind_is_refused_at_once(
    declare: dict[str, Any], problem: str
) -> None:
    def cleanup(batch_size: int = 500) -> None: ...

    with pytest.raises(QueueError) as caught:
        periodic("*/5 * * * *", name="tests.beat.bad", **declare)(
            job(queue="beat", name="tests.beat.cleanup")(cleanup)
        )
    registry.unregister("tests.beat.cleanup")
    assert caught.value.code == ErrorCode.INVALID_HANDLER
    assert problem in caught.value.message and "tests.beat.bad" in caught.value.message


def test_a_second_declaration_of_one_job_needs_its_own_name() -> None:
    with pytest.raises(QueueError) as caught:
        periodic(60)(registry.get("tests.beat.refresh"))
    assert "give this one a name=" in caught.value.message
    periodic(60, name="refresh-often")(registry.get("tests.beat.refresh"))
    Scheduler().run_once(T0)
    assert rows()["refresh-often"].interval == 60.0


def test_check_reports_a_schedules_entry_whose_call_cannot_bind_and_it_never_fires(
    settings: SettingsWrapper, caplog: pytest.LogCaptureFixture
) -> None:
    settings.BLAMEQUEUE = {
        **settings.BLAMEQUEUE,
        "SCHEDULES": {
            "broken": {"job": "tests.beat.refresh", "interval": 60, "args": [1]},
            "fine": {"job": "tests.beat.report", "interval": 60},
        },
    }
    [error] = check_schedule_calls(None)
    assert error.id == "blamequeue.E043" and error.level >= 40
    assert error.msg.startswith('SCHEDULES["broken"] calls tests.beat.refresh(*[1], **{})')
    assert "too many positional arguments" in error.msg
    with pytest.raises(SystemCheckError, match=r"blamequeue\.E043"):  # plain check, no --deploy
        call_command("check", stdout=StringIO(), stderr=StringIO())
    sched = Scheduler()
    sched.run_once(T0)
    assert sched.run_once(T0 + timedelta(minutes=1))["failed"] == 1
    assert "schedule broken skipped: it calls tests.beat.refresh" in caplog.text
    assert not Job.objects.filter(dedupe_key__startswith="schedule:broken:").exists()


def test_blamequeue_schedules_lists_code_schedules_with_their_call_and_skips() -> None:
    sched = Scheduler()
    sched.run_once(T0)
    Schedule.objects.filter(name="tests.beat.refresh").update(skipped=3)
    out = StringIO()
    call_command("blamequeue", "schedules", stdout=out)
    text = out.getvalue()
    assert "tests.beat.refresh (code): tests.beat.refresh on 'beat'" in text
    assert "calls       refresh() (no payload)" in text
    assert "calls       delete_expired(batch_size=100)" in text
    assert "overlap     skip (3 skipped)" in text
