"""Overlap (docs/schedules.md#overlap): under ``overlap="skip"``, the default, an occurrence
due while the schedule's last job still waits or runs is skipped — consumed, counted on the
row, audited and logged — and the next one fires once that job ended; ``"allow"`` fires
anyway."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from django_blamequeue import job
from django_blamequeue.backends import get_backend
from django_blamequeue.jobs import registry
from django_blamequeue.models import AuditEvent, Job, Schedule
from django_blamequeue.sweeper.scheduler import SKIP, Scheduler
from tests.conformance.support import claim_one, succeed

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")
T0 = datetime(2024, 1, 1, 9, tzinfo=UTC)


@pytest.fixture(autouse=True)
def nightly() -> Iterator[Any]:
    @job(queue="nightly", name="tests.schedules.nightly")
    def nightly() -> None:
        return None

    yield nightly
    registry.unregister("tests.schedules.nightly")


def db(alias: str) -> str:
    return get_backend(alias).db  # type: ignore[attr-defined, no-any-return]


def make(alias: str, **fields: Any) -> Schedule:
    return Schedule.objects.using(db(alias)).create(
        name="nightly",
        job="tests.schedules.nightly",
        interval=3600.0,
        last_fired_at=T0,
        backend=alias,
        **fields,
    )


def jobs(alias: str) -> list[str]:
    return list(Job.objects.using(db(alias)).order_by("id").values_list("id", flat=True))


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def test_a_fire_while_the_last_job_waits_is_skipped_counted_audited_and_logged(
    backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="django_blamequeue.scheduler")
    make(backend)  # overlap: the model's default, "skip"
    sched = Scheduler(database=db(backend))
    assert sched.run_once(at(1))["fired"] == 1
    [first] = jobs(backend)
    assert sched.run_once(at(2)) == {"fired": 0, "skipped": 1, "failed": 0}
    assert sched.run_once(at(3))["skipped"] == 1
    assert jobs(backend) == [first]  # no pile-up while nobody runs the job
    s = Schedule.objects.using(db(backend)).get(name="nightly")
    assert (s.skipped, s.last_skipped_at, s.last_fired_at, s.last_job_id) == (
        2,
        at(3),
        at(3),
        first,
    )
    events = AuditEvent.objects.using(db(backend)).filter(action=SKIP).order_by("id")
    assert [(e.job_id, e.data["fire_time"], e.data["running"]) for e in events] == [
        (first, at(2).isoformat(), "pending"),
        (first, at(3).isoformat(), "pending"),
    ]
    assert f"schedule nightly skipped its {at(2).isoformat()} run: its last job {first} " in (
        caplog.text
    )


def test_a_running_job_holds_the_next_fire_and_its_end_lets_it_fire(backend: str) -> None:
    engine = get_backend(backend)
    make(backend)
    sched = Scheduler(database=db(backend))
    sched.run_once(at(1))
    running = claim_one(engine, "nightly")
    assert sched.run_once(at(2))["skipped"] == 1  # inflight counts as running
    assert succeed(engine, running).state == "done"
    assert sched.run_once(at(3))["fired"] == 1
    assert len(jobs(backend)) == 2


def test_allow_fires_whatever_the_last_job_does(backend: str) -> None:
    make(backend, overlap="allow")
    sched = Scheduler(database=db(backend))
    for hour in (1, 2, 3):
        assert sched.run_once(at(hour))["fired"] == 1
    assert len(jobs(backend)) == 3
    assert Schedule.objects.using(db(backend)).get(name="nightly").skipped == 0


def test_a_last_job_that_is_gone_lets_the_schedule_fire(backend: str) -> None:
    make(backend)
    sched = Scheduler(database=db(backend))
    sched.run_once(at(1))
    Job.objects.using(db(backend)).all().delete()  # pruned, or purged
    assert sched.run_once(at(2))["fired"] == 1
