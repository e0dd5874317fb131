"""Enqueue is transactional on every backend. Inside ``transaction.atomic()`` a job
commits or rolls back with the transaction: on the local backend it is a row of it; on an
engine outside the database it is an outbox row of it, relayed after commit. Nothing is seen
before COMMIT, nothing is sent on rollback, and a relay that sends twice makes one job."""

from __future__ import annotations

import threading

import pytest

from django_blamequeue import queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.core.wire import job_from_body
from django_blamequeue.jobs import enqueueing
from django_blamequeue.models import OutboxEntry
from django_blamequeue.testing import wait_until

from .support import audit_db, close_connections, in_transaction, jobs_in, relay


class Rollback(Exception):
    pass


def seen_from_another_connection(engine: Backend, job_id: str) -> bool:
    """Whether a job is visible outside the current transaction (read in a fresh thread)."""
    answer: list[bool] = []

    def look() -> None:
        try:
            answer.append(engine.get(job_id) is not None)
        finally:
            close_connections()

    t = threading.Thread(target=look)
    t.start()
    t.join(10)
    return answer[0]


def test_an_enqueue_rolls_back_with_its_transaction(backend: str, engine: Backend) -> None:
    with pytest.raises(Rollback), in_transaction(engine):
        job_id = queue.enqueue("tx", {"n": 1}, backend=backend).job_id
        raise Rollback
    relay(engine)  # whatever was committed would be delivered now
    assert queue.get_job(job_id, backend=backend) is None
    assert jobs_in(engine, "tx") == 0


def test_an_enqueue_commits_with_its_transaction_and_not_before(
    backend: str, engine: Backend
) -> None:
    with in_transaction(engine):
        job_id = queue.enqueue("tx", {"n": 1}, backend=backend).job_id
        assert not seen_from_another_connection(engine, job_id)
    # At COMMIT on the local backend; through the outbox, once the relay (nudged by the
    # commit) delivered it.
    assert wait_until(lambda: seen_from_another_connection(engine, job_id), 10)


def test_a_committed_enqueue_is_stored(backend: str, engine: Backend) -> None:
    with in_transaction(engine):
        job_id = queue.enqueue("tx", {"n": 1}, backend=backend).job_id
    assert wait_until(lambda: queue.get_job(job_id, backend=backend) is not None, 10)
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and (info.state, info.payload) == ("pending", {"n": 1})


def test_a_rolled_back_savepoint_takes_its_enqueue_and_keeps_the_outer_one(
    backend: str, engine: Backend
) -> None:
    with in_transaction(engine):
        kept = queue.enqueue("tx", "outer", backend=backend).job_id
        with pytest.raises(Rollback), in_transaction(engine):
            dropped = queue.enqueue("tx", "inner", backend=backend).job_id
            raise Rollback
    assert wait_until(lambda: queue.get_job(kept, backend=backend) is not None, 10)
    relay(engine)
    assert queue.get_job(dropped, backend=backend) is None


def test_enqueue_many_rolls_back_as_a_whole(backend: str, engine: Backend) -> None:
    with pytest.raises(Rollback), in_transaction(engine):
        queue.enqueue_many("tx", range(10), backend=backend)
        raise Rollback
    relay(engine)
    assert jobs_in(engine, "tx") == 0


def test_enqueue_many_commits_as_a_whole(backend: str, engine: Backend) -> None:
    with in_transaction(engine):
        queue.enqueue_many("tx", range(10), backend=backend)
    assert wait_until(lambda: jobs_in(engine, "tx") == 10, 10)


def test_an_enqueue_of_an_id_that_exists_makes_no_second_job(backend: str, engine: Backend) -> None:
    """What makes a relay that sends twice harmless: the job id is fixed at enqueue."""
    job_id = queue.enqueue("tx", {"n": 1}, backend=backend).job_id
    again = enqueueing.new_job(
        "tx",
        {"n": 2},
        job_id=job_id,
    )
    engine.enqueue_many([again])
    engine.enqueue_many([again])
    assert jobs_in(engine, "tx") == 1
    assert queue.get_job(job_id, backend=backend).payload == {"n": 1}  # type: ignore[union-attr]


@pytest.mark.requires("!transactional_enqueue")
def test_a_relayed_enqueue_delivered_twice_makes_one_job(backend: str, engine: Backend) -> None:
    """The relay may die between the send and deleting the outbox row: the next pass sends
    the same job again, and the engine keeps one."""
    with in_transaction(engine):
        job_id = queue.enqueue("tx", {"n": 1}, backend=backend).job_id
        body = OutboxEntry.objects.using(audit_db(engine)).get(job_id=job_id).body
    relay(engine)  # the first delivery (the after-commit relay thread may make it first)
    assert queue.get_job(job_id, backend=backend) is not None
    engine.enqueue_many([job_from_body(body)])  # the second delivery
    assert jobs_in(engine, "tx") == 1
    # The relay deletes its row after the send that made the job visible: wait for that too.
    sent = OutboxEntry.objects.using(audit_db(engine)).filter(job_id=job_id)
    assert wait_until(lambda: not sent.exists(), 10)  # our pass's, or the thread's
