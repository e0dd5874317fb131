"""relay/routing: cross-backend flow work is delivered through the target backend's verbs —
an alias not configured is refused, outboxed jobs are enqueued once however often they are
delivered (their ids are fixed), and a cascade of cancels goes on past a child it cannot reach."""

from __future__ import annotations

import logging

import pytest

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.core import ids
from django_blamequeue.core.records import NewJob
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.relay import routing
from django_blamequeue.serializers import encode

pytestmark = pytest.mark.django_db

Q = "relay-routing"


def outboxed(payload: object) -> NewJob:
    """A job as an outbox entry carries it: validated, its id already given."""
    return NewJob(job_id=ids.new_id(), queue=Q, name="tests.relay.job", payload=encode(payload))


def test_the_target_of_an_entry_is_its_backend() -> None:
    assert routing.target("default") is get_backend("default")


def test_an_entry_bound_for_a_backend_not_configured_is_refused() -> None:
    with pytest.raises(QueueError) as caught:
        routing.target("gone")
    assert caught.value.code == ErrorCode.UNKNOWN_BACKEND
    with pytest.raises(QueueError) as caught:
        routing.deliver_jobs("gone", [outboxed(1)])
    assert caught.value.code == ErrorCode.UNKNOWN_BACKEND


def test_outboxed_jobs_are_enqueued_once_however_often_they_are_delivered() -> None:
    jobs = [outboxed({"n": 1}), outboxed({"n": 2})]
    routing.deliver_jobs("default", jobs)
    routing.deliver_jobs("default", jobs)  # the relay crashed before marking them done
    assert queue.size(Q) == 2
    info = queue.get_job(jobs[1].job_id)
    assert info is not None and (info.state, info.payload) == ("pending", {"n": 2})


def test_a_cascade_cancels_every_child_it_reaches_and_logs_the_one_it_cannot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = queue.enqueue(Q).job_id, queue.enqueue(Q).job_id
    children = [("default", first), ("gone", "CHILDONABACKENDGONE0000000"), ("default", second)]
    with caplog.at_level(logging.WARNING, logger="django_blamequeue.flows"):
        assert routing.cancel_children(children) == 2
    states = [getattr(queue.get_job(j), "state", None) for j in (first, second)]
    assert states == ["cancelled", "cancelled"]
    assert "cascade to child CHILDONABACKENDGONE0000000 on gone failed: QueueError" in caplog.text
