"""models/jobs: the job table's querysets named for states (what the admin and operators
filter by) and ``traced``, which finds a trace's jobs inflight or not, on the SQLite backend."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.models.jobs import ACTIVE_STATES, STATE_CHOICES, Job, JobQuerySet, traced
from tests.conformance.support import claim_one, fail, succeed

pytestmark = pytest.mark.django_db

Q = "models-jobs"


@dataclass(frozen=True)
class OneOfEach:
    pending: str
    blocked: str
    inflight: str
    done: str
    failed: str
    cancelled: str


@pytest.fixture
def jobs() -> OneOfEach:
    """A job in every state (each claimed as soon as it is enqueued, so claims take it)."""
    engine = get_backend("default")
    failed = queue.enqueue(Q, max_attempts=1, trace_id="trace-other").job_id
    fail(engine, claim_one(engine, Q))
    done = queue.enqueue(Q).job_id
    succeed(engine, claim_one(engine, Q))
    cancelled = queue.enqueue(Q).job_id
    assert queue.cancel(cancelled)
    made = queue.enqueue_flow(
        Q,
        [
            {"name": "first", "trace_id": "trace-1"},
            {"name": "then", "depends_on": ["first"], "trace_id": "trace-1"},
        ],
    )
    first, then = (j["job_id"] for j in made["jobs"])
    assert claim_one(engine, Q).job_id == first
    pending = queue.enqueue(Q, trace_id="trace-1").job_id
    return OneOfEach(pending, then, first, done, failed, cancelled)


def ids(rows: JobQuerySet) -> set[str]:
    return set(rows.filter(queue=Q).values_list("id", flat=True))


def test_each_state_has_its_queryset(jobs: OneOfEach) -> None:
    assert ids(Job.objects.pending()) == {jobs.pending}
    assert ids(Job.objects.inflight()) == {jobs.inflight}
    assert ids(Job.objects.failed()) == {jobs.failed}


def test_waiting_jobs_are_the_pending_and_the_blocked(jobs: OneOfEach) -> None:
    assert ids(Job.objects.waiting()) == {jobs.pending, jobs.blocked}


def test_active_jobs_are_those_not_yet_done_failed_or_cancelled(jobs: OneOfEach) -> None:
    assert ids(Job.objects.active()) == {jobs.pending, jobs.blocked, jobs.inflight}
    assert sorted(ACTIVE_STATES) == ["blocked", "inflight", "pending", "waiting_children"]


def test_a_trace_finds_its_jobs_whether_inflight_or_not(jobs: OneOfEach) -> None:
    assert ids(Job.objects.traced("trace-1")) == {jobs.pending, jobs.blocked, jobs.inflight}
    assert ids(Job.objects.filter(traced("trace-other"))) == {jobs.failed}
    assert ids(Job.objects.traced("no-such-trace")) == set()


def test_every_state_is_a_choice_of_the_state_column() -> None:
    assert {value for value, _ in STATE_CHOICES} == {
        "pending",
        "blocked",
        "inflight",
        "waiting_children",
        "done",
        "failed",
        "cancelled",
    }
    assert dict(STATE_CHOICES)["waiting_children"] == "waiting children"
