"""SPEC §3: on the local backend an enqueue inside ``transaction.atomic()`` is a row of that
transaction: it commits with it and rolls back with it."""

from __future__ import annotations

import threading

import pytest
from django.db import connections, transaction

from django_blamequeue import queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.models import Job

from .support import jobs_in


class Rollback(Exception):
    pass


def seen_from_another_connection(engine: Backend, job_id: str) -> bool:
    """Whether a job is visible outside the current transaction (read in a fresh thread)."""
    answer: list[bool] = []

    def look() -> None:
        try:
            answer.append(Job.objects.using(engine.db).filter(id=job_id).exists())  # type: ignore[attr-defined]
        finally:
            connections.close_all()

    t = threading.Thread(target=look)
    t.start()
    t.join(10)
    return answer[0]


def test_an_enqueue_rolls_back_with_its_transaction(backend: str, engine: Backend) -> None:
    with pytest.raises(Rollback), transaction.atomic(using=engine.db):
        job_id = queue.enqueue("tx", {"n": 1}, backend=backend).job_id
        assert queue.get_job(job_id, backend=backend) is not None  # a row of this transaction
        raise Rollback
    assert queue.get_job(job_id, backend=backend) is None
    assert jobs_in(engine, "tx") == 0


def test_an_enqueue_commits_with_its_transaction_and_not_before(
    backend: str, engine: Backend
) -> None:
    with transaction.atomic(using=engine.db):
        job_id = queue.enqueue("tx", {"n": 1}, backend=backend).job_id
        assert not seen_from_another_connection(engine, job_id)
    assert seen_from_another_connection(engine, job_id)


def test_a_committed_enqueue_is_stored(backend: str, engine: Backend) -> None:
    with transaction.atomic(using=engine.db):
        job_id = queue.enqueue("tx", {"n": 1}, backend=backend).job_id
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and info.state == "pending"


def test_a_rolled_back_savepoint_takes_its_enqueue_and_keeps_the_outer_one(
    backend: str, engine: Backend
) -> None:
    with transaction.atomic(using=engine.db):
        kept = queue.enqueue("tx", "outer", backend=backend).job_id
        with pytest.raises(Rollback), transaction.atomic(using=engine.db):
            dropped = queue.enqueue("tx", "inner", backend=backend).job_id
            raise Rollback
    assert queue.get_job(kept, backend=backend) is not None
    assert queue.get_job(dropped, backend=backend) is None


def test_enqueue_many_rolls_back_as_a_whole(backend: str, engine: Backend) -> None:
    with pytest.raises(Rollback), transaction.atomic(using=engine.db):
        queue.enqueue_many("tx", range(10), backend=backend)
        raise Rollback
    assert jobs_in(engine, "tx") == 0
