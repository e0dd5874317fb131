"""One worker process serves queues on two databases (SQLite and PostgreSQL) and drains both."""

from __future__ import annotations

import time

import pytest

from django_blamequeue import queue
from django_blamequeue.models import Job
from tests.conftest import need_server
from tests.procapp.jobs import QUEUE

from .conftest import Processes, Report, effects, redeliveries, states

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

JOBS = {"default": 300, "postgres": 600}


def test_one_worker_process_drains_queues_on_two_databases(
    processes: Processes, report: Report
) -> None:
    need_server("postgres")
    for alias, n in JOBS.items():
        queue.enqueue_many(
            QUEUE, [{"i": i} for i in range(n)], name="procapp.effect", backend=alias
        )
    start = time.monotonic()
    worker = processes.spawn(
        "runworker",
        QUEUE,
        "--backend",
        "default",
        "--backend",
        "postgres",
        "--burst",
        "--concurrency",
        "4",
        "--no-sweep",
    )
    code = worker.wait(120)
    elapsed = time.monotonic() - start
    assert code == 0, f"{worker.name} exited with {code}:\n{worker.tail()}"

    banner = [" ".join(line.split()) for line in worker.stdout().splitlines()]
    assert "backend default (local, sqlite, database default)" in banner, worker.tail()
    assert "backend postgres (local, postgresql, database postgres)" in banner, worker.tail()
    assert any(line.startswith("burst finished: done 900 ") for line in banner), worker.tail()
    for alias, n in JOBS.items():
        assert states(alias) == {"done": n}
        assert effects(alias) == n  # each job's side effect, written once, in its own database
        assert redeliveries(alias) == []
        assert not Job.objects.using(alias).filter(queue=QUEUE).exclude(attempts=1).exists()
    report(
        "several databases[sqlite+postgres]",
        jobs=sum(JOBS.values()),
        processes=1,
        split="/".join(str(n) for n in JOBS.values()),
        run_twice=0,
        s=elapsed,
    )
