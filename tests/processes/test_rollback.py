"""Enqueue joins the caller's transaction: a rolled-back batch is never seen nor run."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections, transaction

from django_blamequeue import queue
from django_blamequeue.models import Job
from tests.procapp.jobs import QUEUE

from .conftest import Processes, Report, effects, engine, states, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

JOBS = 10_000


class Rollback(Exception):
    pass


def count_elsewhere(db: str, into: list[int]) -> threading.Thread:
    """Count the queue's rows from another connection (another thread), as a worker would."""

    def run() -> None:
        try:
            into.append(Job.objects.using(db).filter(queue=QUEUE).count())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_jobs_enqueued_in_a_rolled_back_transaction_are_never_visible_nor_run(
    backend: str, processes: Processes, report: Report
) -> None:
    worker = processes.worker(backend, "--concurrency", "4", "--poll", "0.1", "--no-sweep")
    worker.wait_started()
    inside: list[int] = []
    elsewhere: list[int] = []
    probe: threading.Thread | None = None
    start = time.monotonic()
    with pytest.raises(Rollback), transaction.atomic(using=backend):
        queue.enqueue_many(
            QUEUE, [{"i": i} for i in range(JOBS)], name="procapp.effect", backend=backend
        )
        inside.append(Job.objects.using(backend).filter(queue=QUEUE).count())
        probe = count_elsewhere(backend, elsewhere)
        # On SQLite the reader may wait for the writer's lock: then it counts after the
        # rollback, which must show nothing either.
        probe.join(timeout=3)
        raise Rollback
    held = time.monotonic() - start
    assert probe is not None
    probe.join(timeout=30)

    assert inside == [JOBS]
    assert elsewhere == [0]
    assert states(backend) == {}
    sentinel = queue.enqueue(QUEUE, {"sentinel": True}, name="procapp.effect", backend=backend)
    wait_for(lambda: states(backend) == {"done": 1}, 30, "the sentinel job")
    ran = effects(backend)
    job = Job.objects.using(backend).get(id=sentinel.job_id)
    assert job.started_at is not None
    latency = (job.started_at - job.created_at).total_seconds()
    report(
        f"rollback[{engine(backend)}]",
        enqueued_in_atomic=JOBS,
        open_for=f"{held:.1f} s",
        visible_elsewhere=elsewhere[0],
        visible_after=0,
        run=ran - 1,
        sentinel_started_after=f"{latency * 1000:.0f} ms",
    )
    assert ran == 1
    assert worker.alive() and worker.stop() == 0
