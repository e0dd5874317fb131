"""A worker whose clock is 5 minutes off rescues nothing early and runs nothing early: every
time that decides anything is the database's (docs/lifecycle.md).

PostgreSQL only: SQLite lives on the workers' own host, so its clock is theirs by design (a
host whose clock is wrong is wrong for the database too). The skewed worker starts with
``clockskew/sitecustomize.py``, which shifts its ``time.time()`` and ``datetime.now()``; the
effect rows it stores carry its ``time.time()`` to show the skew was in force.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.db.models import Max, Sum

from django_blamequeue import audit, queue
from django_blamequeue.core.records import EnqueuedJob
from django_blamequeue.models import AuditEvent, Job
from tests.procapp.jobs import QUEUE
from tests.procapp.models import SideEffect

from .conftest import ROOT, Processes, Report, count, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

CLOCKSKEW = Path(__file__).with_name("clockskew")
LONG, DELAYED = 8, 20
ARGS = ("--concurrency", "4", "--lease", "2", "--poll", "0.2")
OVERRIDES = {"SWEEP_INTERVAL": 0.2, "MAX_STALLED_COUNT": 5}


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("skew", [300, -300], ids=["ahead", "behind"])
def test_a_worker_with_a_skewed_clock_neither_rescues_nor_runs_early(
    backend: str, skew: int, processes: Processes, report: Report
) -> None:
    faked = {
        "BLAMEQUEUE_TEST_CLOCK_SKEW": str(skew),
        "PYTHONPATH": os.pathsep.join([str(CLOCKSKEW), str(ROOT)]),
    }
    skewed = processes.worker(backend, *ARGS, overrides=OVERRIDES, extra_env=faked)
    honest = processes.worker(backend, *ARGS, overrides=OVERRIDES)
    skewed.wait_started()
    honest.wait_started()
    # Delayed a minute: a worker ahead by five would find them due by its own clock.
    delayed = queue.enqueue_many(
        QUEUE,
        [{"delayed": i} for i in range(DELAYED)],
        name="procapp.effect",
        backend=backend,
        delay=60,
    )
    # Four seconds each under a two-second lease: each worker holds four, renewing them while
    # the other's sweeper runs every 0.2 s. A lease computed by a clock behind would be
    # expired already; a sweeper with a clock ahead would find the others' leases expired.
    long_runs = queue.enqueue_many(
        QUEUE, [{"sleep": 4}] * LONG, name="procapp.effect", backend=backend
    )
    wait_for(lambda: count(backend, "done") == LONG, 60, "the long jobs")

    jobs = Job.objects.using(backend)

    def effects_of(enqueued: list[EnqueuedJob]) -> int:
        ids = [j.job_id for j in enqueued]
        n: int = SideEffect.objects.using(backend).filter(job_id__in=ids).count()
        return n

    long_jobs = jobs.filter(id__in=[j.job_id for j in long_runs])
    stalls = long_jobs.aggregate(n=Sum("stalls"))["n"] or 0
    rescued = AuditEvent.objects.using(backend).filter(action=audit.STALLED).count()
    waiting = jobs.filter(id__in=[j.job_id for j in delayed], state="pending", attempts=0)
    early = DELAYED - waiting.count()
    by: dict[int, list[float]] = {skewed.pid: [], honest.pid: []}
    for e in SideEffect.objects.using(backend).filter(job_id__in=[j.job_id for j in long_runs]):
        finished = long_jobs.get(id=e.job_id).finished_at  # the ack, just after the effect
        assert finished is not None
        by[e.pid].append(e.host_clock - finished.timestamp())
    seen_skew = sum(by[skewed.pid]) / max(1, len(by[skewed.pid]))
    latest = long_jobs.aggregate(m=Max("attempts"))["m"]
    report(
        f"clock-skew[{skew:+d} s]",
        skewed_worker_ran=f"{len(by[skewed.pid])} of {LONG}",
        its_clock=f"{seen_skew:+.0f} s off the database's",
        early_rescues=rescued,
        early_runs=f"{early} of {DELAYED} jobs delayed 60 s",
    )
    assert len(by[skewed.pid]) == len(by[honest.pid]) == LONG // 2
    assert abs(seen_skew - skew) < 30, "the worker's clock was not skewed"
    assert all(abs(d) < 30 for d in by[honest.pid])
    assert stalls == 0 and rescued == 0 and latest == 1
    assert early == 0 and effects_of(delayed) == 0
    assert skewed.stop() == 0 and honest.stop() == 0
