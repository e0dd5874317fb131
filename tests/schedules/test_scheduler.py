"""The scheduler (docs/schedules.md): fires due schedules with a dedupe key per
(schedule, fire time), coalesces missed fires, fires each occurrence once however many
sweepers race, mirrors ``SCHEDULES``, and logs (and counts as failed) a schedule it cannot
fire."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connections

from django_blamequeue import job, queue
from django_blamequeue.backends import get_backend
from django_blamequeue.jobs import registry
from django_blamequeue.models import AuditEvent, Job, Schedule
from django_blamequeue.sweeper import services_for
from django_blamequeue.sweeper.scheduler import FIRE, Scheduler

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")
T0 = datetime(2024, 1, 1, 9, tzinfo=UTC)
ONE = {"fired": 1, "skipped": 0, "failed": 0}


@pytest.fixture(autouse=True)
def tick() -> Iterator[Any]:
    @job(queue="ticks", name="tests.schedules.tick")
    def tick(payload: Any) -> None:
        return None

    yield tick
    registry.unregister("tests.schedules.tick")


def db(alias: str) -> str:
    return get_backend(alias).db  # type: ignore[attr-defined, no-any-return]


def schedule(alias: str, name: str, **fields: Any) -> Schedule:
    """A schedule row; ``overlap="allow"`` unless told: these tests fire occurrences one after
    the other with no worker running the jobs (``test_overlap.py`` tests the skips)."""
    fields.setdefault("job", "tests.schedules.tick")
    fields.setdefault("last_fired_at", T0)
    fields.setdefault("overlap", "allow")
    return Schedule.objects.using(db(alias)).create(name=name, backend=alias, **fields)


def fired(alias: str, name: str) -> list[tuple[str, Any]]:
    rows = Job.objects.using(db(alias)).filter(dedupe_key__startswith=f"schedule:{name}:")
    return sorted(rows.values_list("dedupe_key", "queue"))


def test_a_due_schedule_fires_once_with_a_dedupe_key_and_an_audit_event(backend: str) -> None:
    schedule(backend, "hourly", cron="0 * * * *", payload={"n": 1})
    sched = Scheduler(database=db(backend))
    assert sched.run_once(T0 + timedelta(minutes=59)) == {}
    assert sched.run_once(T0 + timedelta(hours=1)) == ONE
    assert sched.run_once(T0 + timedelta(hours=1, minutes=5)) == {}
    key = "schedule:hourly:2024-01-01T10:00:00+00:00"
    assert fired(backend, "hourly") == [(key, "ticks")]
    info = queue.get_job(Job.objects.using(db(backend)).get(dedupe_key=key).id, backend=backend)
    assert info is not None and info.payload == {"n": 1} and info.name == "tests.schedules.tick"
    assert info.origin is not None and info.origin["schedule"] == "hourly"  # the blame trail
    s = Schedule.objects.using(db(backend)).get(name="hourly")
    assert s.last_fired_at == T0 + timedelta(hours=1)
    [event] = AuditEvent.objects.using(db(backend)).filter(action=FIRE)
    assert FIRE == "system.queue.schedule.fire"
    assert (event.job_id, event.data) == (
        info.job_id,
        {"schedule": "hourly", "fire_time": "2024-01-01T10:00:00+00:00"},
    )


def test_fires_missed_while_everything_was_down_coalesce_into_one(backend: str) -> None:
    schedule(backend, "quarterly", cron="*/15 * * * *")
    schedule(backend, "minutely", interval=60.0, queue="elsewhere")
    sched = Scheduler(database=db(backend))
    assert sched.run_once(T0 + timedelta(hours=4, minutes=7, seconds=30)) == {
        "fired": 2,
        "skipped": 0,
        "failed": 0,
    }
    assert fired(backend, "quarterly") == [
        ("schedule:quarterly:2024-01-01T13:00:00+00:00", "ticks")
    ]
    assert fired(backend, "minutely") == [
        ("schedule:minutely:2024-01-01T13:07:00+00:00", "elsewhere")
    ]
    assert sched.run_once(T0 + timedelta(hours=4, minutes=7, seconds=59)) == {}
    assert sched.run_once(T0 + timedelta(hours=4, minutes=8)) == ONE


def test_concurrent_schedulers_fire_each_occurrence_exactly_once(backend: str) -> None:
    names = [f"s{i}" for i in range(4)]
    for name in names:
        schedule(backend, name, interval=60.0)
    occurrences = [T0 + timedelta(minutes=m) for m in (1, 2, 5)]
    threads, rounds = 8, len(occurrences)
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []
    counts: list[int] = []

    def sweeper() -> None:
        sched = Scheduler(database=db(backend))
        try:
            for now in occurrences:
                barrier.wait(timeout=30)  # all of them at the same instant
                counts.append(sched.run_once(now).get("fired", 0))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    pool = [threading.Thread(target=sweeper) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(60)
    assert not errors, errors
    assert sum(counts) == len(names) * rounds
    for name in names:
        assert [k for k, _ in fired(backend, name)] == [
            f"schedule:{name}:{now.isoformat()}" for now in occurrences
        ]
    assert AuditEvent.objects.using(db(backend)).filter(action=FIRE).count() == len(names) * rounds


def test_schedules_from_settings_are_synced_and_anchored_at_now(
    backend: str, settings: Any
) -> None:
    settings.BLAMEQUEUE = {
        **settings.BLAMEQUEUE,
        "SCHEDULES": {
            "nightly": {
                "job": "tests.schedules.tick",
                "cron": "0 3 * * *",
                "timezone": "Europe/Berlin",
                "payload": {"kind": "nightly"},
                "backend": backend,
            },
            "minutely": {
                "job": "tests.schedules.tick",
                "interval": 60,
                "backend": backend,
                "overlap": "allow",
            },
        },
    }
    schedule(backend, "from-admin", interval=3600.0)
    sched = Scheduler(database=db(backend))
    assert sched.run_once(T0) == {}  # anchored at now: the first fire is the next one
    rows = {s.name: s for s in Schedule.objects.using(db(backend)).all()}
    assert sorted(rows) == ["from-admin", "minutely", "nightly"]
    n = rows["nightly"]
    assert (n.source, n.cron, n.timezone, n.payload, n.last_fired_at) == (
        "settings",
        "0 3 * * *",
        "Europe/Berlin",
        {"kind": "nightly"},
        T0,
    )
    assert rows["from-admin"].source == "admin"

    assert sched.run_once(T0 + timedelta(seconds=61)) == ONE
    assert len(fired(backend, "minutely")) == 1
    assert sched.run_once(datetime(2024, 1, 2, 2, 0, 30, tzinfo=UTC)) == {**ONE, "fired": 3}
    assert fired(backend, "nightly") == [("schedule:nightly:2024-01-02T02:00:00+00:00", "ticks")]

    settings.BLAMEQUEUE = {
        **settings.BLAMEQUEUE,
        "SCHEDULES": {
            "minutely": {"job": "tests.schedules.tick", "interval": 120, "backend": backend}
        },
    }
    sched.run_once(datetime(2024, 1, 2, 2, 1, tzinfo=UTC))
    rows = {s.name: s for s in Schedule.objects.using(db(backend)).all()}
    assert sorted(rows) == ["from-admin", "minutely"]  # removed from settings → removed here
    assert rows["minutely"].interval == 120.0


def test_a_schedule_naming_an_unknown_job_is_logged_and_counted_as_failed(
    backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    schedule(backend, "a-broken", job="tests.schedules.nope", interval=60.0)
    schedule(backend, "b-bad-cron", cron="not a cron")
    schedule(backend, "c-good", interval=60.0)
    sched = Scheduler(database=db(backend))
    assert sched.run_once(T0 + timedelta(minutes=1)) == {"fired": 1, "skipped": 0, "failed": 2}
    assert "schedule a-broken skipped: job 'tests.schedules.nope' is not registered" in caplog.text
    assert "schedule b-bad-cron skipped" in caplog.text
    assert len(fired(backend, "c-good")) == 1
    assert (
        Schedule.objects.using(db(backend)).get(name="a-broken").last_fired_at == T0
    )  # not consumed


def test_a_disabled_schedule_does_not_fire(backend: str) -> None:
    schedule(backend, "off", interval=60.0, enabled=False)
    assert Scheduler(database=db(backend)).run_once(T0 + timedelta(hours=1)) == {}
    assert fired(backend, "off") == []


def test_a_schedule_made_without_a_last_fire_is_anchored_at_its_first_sweep(backend: str) -> None:
    schedule(backend, "new", interval=60.0, last_fired_at=None)
    sched = Scheduler(database=db(backend))
    assert sched.run_once(T0) == {}
    assert sched.run_once(T0 + timedelta(minutes=1)) == ONE


def test_the_scheduler_runs_in_every_sweeper(backend: str) -> None:
    [scheduler] = [s for s in services_for([get_backend(backend)]) if s.name == "scheduler"]
    assert isinstance(scheduler, Scheduler) and scheduler.period <= 5.0
