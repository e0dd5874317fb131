"""A worker crash dead-letters only the job that crashed it.

A handler kills its worker process (SIGKILL from inside, as a segfault would) while three
innocent jobs run beside it. Nobody can tell which job killed the process, so none of the four
is convicted: all go back to pending with a stall, and having reached ``MAX_STALLED_COUNT``
(1) they are on probation — the next worker runs each of them alone, its lease marked so. The
guilty handler then crashes a worker while alone and goes to the DLQ as ``stalled``; the
innocent ones finish. A supervisor loop restarts burst workers until nothing is left, as
systemd would.
"""

from __future__ import annotations

import signal
import time

import pytest

from django_blamequeue import queue
from django_blamequeue.models import Job
from tests.procapp.hostile import CRASH_QUEUE

from .conftest import Processes, Report, engine

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

INNOCENT = 6
OVERRIDES = {"SWEEP_INTERVAL": 0.2, "MAX_STALLED_COUNT": 1}


def test_a_handler_that_crashes_its_worker_is_dead_lettered_alone(
    backend: str, processes: Processes, report: Report
) -> None:
    payloads = [{"crash": True}] + [{"n": i} for i in range(INNOCENT)]
    jobs = queue.enqueue_many(CRASH_QUEUE, payloads, name="procapp.crash", backend=backend)
    guilty, innocent = jobs[0].job_id, [j.job_id for j in jobs[1:]]

    start = time.monotonic()
    crashes, runs = 0, 0
    while runs < 6:  # a supervisor: restart the worker until a burst ends cleanly
        runs += 1
        worker = processes.spawn(
            "runworker", CRASH_QUEUE, "--backend", backend, "--burst", "--concurrency", "4",
            "--lease", "1", overrides=OVERRIDES,
        )  # fmt: skip
        code = worker.wait(60)
        assert code is not None, worker.tail()
        if code == 0:
            break
        assert code == -signal.SIGKILL, worker.tail()
        crashes += 1
    elapsed = time.monotonic() - start

    rows = {r.id: r for r in Job.objects.using(backend).filter(queue=CRASH_QUEUE)}
    dead_innocent = [i for i in innocent if rows[i].state == "failed"]
    report(
        f"probation[{engine(backend)}]",
        worker_crashes=crashes,
        guilty=f"{rows[guilty].state} ({rows[guilty].reason}) after {rows[guilty].stalls} stalls",
        innocent_done=f"{sum(rows[i].state == 'done' for i in innocent)} of {INNOCENT}",
        innocent_dead_lettered=len(dead_innocent),
        most_stalls_of_an_innocent=max(rows[i].stalls for i in innocent),
        s=elapsed,
    )
    assert (rows[guilty].state, rows[guilty].reason, rows[guilty].stalls) == (
        "failed",
        "stalled",
        2,
    )
    assert dead_innocent == []
    assert all(rows[i].state == "done" for i in innocent)
    assert crashes == 2  # once in company (convicts nobody), once alone
