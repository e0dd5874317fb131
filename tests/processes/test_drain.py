"""Several worker processes draining one queue never run a job twice."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from django_blamequeue import queue
from django_blamequeue.models import Job
from tests.procapp.jobs import QUEUE
from tests.procapp.models import SideEffect

from .conftest import Processes, Report, effects, engine, redeliveries, states

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

WORKERS = 3
JOBS = {"default": 1000, "postgres": 2000}


def test_workers_draining_one_queue_run_every_job_exactly_once(
    backend: str, processes: Processes, report: Report
) -> None:
    n = JOBS[backend]
    queue.enqueue_many(QUEUE, [{"i": i} for i in range(n)], name="procapp.effect", backend=backend)
    start = time.monotonic()
    workers = [
        processes.worker(backend, "--burst", "--concurrency", "4", "--no-sweep")
        for _ in range(WORKERS)
    ]
    for w in workers:
        code = w.wait(120)
        assert code == 0, f"{w.name} exited with {code}:\n{w.tail()}"
        assert "burst finished" in w.stdout(), w.tail()
    elapsed = time.monotonic() - start

    assert states(backend) == {"done": n}
    assert effects(backend) == n
    assert redeliveries(backend) == []
    assert not Job.objects.using(backend).filter(queue=QUEUE).exclude(attempts=1).exists()
    by_worker: Counter[int] = Counter(
        SideEffect.objects.using(backend).values_list("pid", flat=True)
    )
    assert set(by_worker) <= {w.pid for w in workers}
    report(
        f"drain[{engine(backend)}]",
        jobs=n,
        workers=WORKERS,
        split="/".join(str(by_worker.get(w.pid, 0)) for w in workers),
        run_twice=0,
        s=elapsed,
    )
