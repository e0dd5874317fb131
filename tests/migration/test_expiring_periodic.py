"""An expiring periodic job (the shape of paperless-ngx's hourly classifier training, whose beat
entry carries an ``expires`` so a run stuck behind a backlog is dropped, re-written): a run not
started within its expiry never starts; it ends cancelled as ``expired``, audited, counted, and
the schedule fires again at its next occurrence."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from django_blamequeue import job, periodic
from django_blamequeue.audit import EXPIRE
from django_blamequeue.backends import get_backend
from django_blamequeue.jobs import registry
from django_blamequeue.models import Job
from django_blamequeue.sweeper.expirer import Expirer
from django_blamequeue.sweeper.scheduler import Scheduler
from django_blamequeue.testing import capture_events, capture_jobs

pytestmark = pytest.mark.django_db(transaction=True)
T0 = datetime(2024, 3, 1, 0, 0, tzinfo=UTC)
NAME = "docs.tasks.train_classifier"
trained: list[int] = []


@pytest.fixture(autouse=True)
def train_classifier() -> Iterator[None]:
    trained.clear()

    @periodic("5 * * * *", expires=1800)
    @job(queue="periodic", name=NAME)
    def train_classifier() -> None:
        trained.append(1)

    yield
    registry.unregister(NAME)


def test_a_run_stuck_behind_a_backlog_expires_and_the_next_hour_runs() -> None:
    engine = get_backend(None)
    sched = Scheduler()
    sched.run_once(T0)
    assert sched.run_once(T0 + timedelta(hours=1))["fired"] == 1
    stale = Job.objects.get(name=NAME)
    assert stale.expires_at == stale.created_at + timedelta(seconds=1800)
    late = engine.now() + timedelta(seconds=1801)
    with capture_events() as events:
        assert engine.claim(["periodic"], 10, 30, now=late) == []  # the backlog cleared: too late
        assert Expirer(engine).run_once(late) == 1
    stale.refresh_from_db()
    assert (stale.state, stale.reason) == ("cancelled", "expired")
    assert events.actions(stale.id) == [EXPIRE]
    [stats] = [s for s in engine.stats() if s.queue == "periodic"]
    assert stats.expired_last_hour == 1
    with capture_jobs() as captured:
        assert sched.run_once(T0 + timedelta(hours=2))["fired"] == 1  # an expired run holds nothing
        captured.run_jobs()
    assert trained == [1]
