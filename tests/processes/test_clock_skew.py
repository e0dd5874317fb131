"""A worker whose clock is 5 minutes off rescues nothing early and runs nothing early: every
time that decides anything is the database's (SPEC §2).

PostgreSQL only: SQLite lives on the workers' own host, so its clock is theirs by design (a
host whose clock is wrong is wrong for the database too). The skew is real: the worker runs
under libfaketime (``LD_PRELOAD``), which shifts every clock the process reads; the effect rows
it stores carry its ``time.time()`` to show it.
"""

from __future__ import annotations

import glob
import time

import pytest
from django.db.models import Max, Sum

from django_blamequeue import audit, queue
from django_blamequeue.models import AuditEvent, Job
from tests.procapp.jobs import QUEUE
from tests.procapp.models import SideEffect

from .conftest import Processes, Report, count, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

LIBFAKETIME = sorted(
    glob.glob("/usr/lib/*/faketime/libfaketime.so.1") + glob.glob("/usr/lib/faketime/libfaketime.so.1")
)
LONG, DELAYED = 8, 20
ARGS = ("--concurrency", "4", "--lease", "2", "--poll", "0.2")
OVERRIDES = {"SWEEP_INTERVAL": 0.2, "MAX_STALLED_COUNT": 5}


@pytest.mark.skipif(not LIBFAKETIME, reason="libfaketime not installed (Debian: faketime)")
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("skew", [300, -300], ids=["ahead", "behind"])
def test_a_worker_with_a_skewed_clock_neither_rescues_nor_runs_early(
    backend: str, skew: int, processes: Processes, report: Report
) -> None:
    faked = {"LD_PRELOAD": LIBFAKETIME[0], "FAKETIME": f"{skew:+d}s",
             "FAKETIME_DONT_FAKE_MONOTONIC": "1"}  # fmt: skip
    skewed = processes.worker(backend, *ARGS, overrides=OVERRIDES, extra_env=faked)
    honest = processes.worker(backend, *ARGS, overrides=OVERRIDES)
    skewed.wait_started()
    honest.wait_started()
    # Delayed a minute: a worker ahead by five would find them due by its own clock.
    queue.enqueue_many(QUEUE, [{"delayed": i} for i in range(DELAYED)], name="procapp.effect",
                       backend=backend, delay=60)  # fmt: skip
    # Four seconds each under a two-second lease: each worker holds four, renewing them while
    # the other's sweeper runs every 0.2 s. A lease computed by a clock behind would be
    # expired already; a sweeper with a clock ahead would find the others' leases expired.
    queue.enqueue_many(QUEUE, [{"sleep": 4}] * LONG, name="procapp.effect", backend=backend)
    wait_for(lambda: count(backend, "done") == LONG, 60, "the long jobs")

    jobs = Job.objects.using(backend).filter(queue=QUEUE)
    long_jobs = jobs.exclude(state="pending")
    stalls = long_jobs.aggregate(n=Sum("stalls"))["n"] or 0
    rescued = AuditEvent.objects.using(backend).filter(action=audit.STALLED).count()
    early = jobs.filter(state="pending").exclude(attempts=0).count() + (DELAYED - count(backend, "pending"))
    by = {pid: [] for pid in (skewed.pid, honest.pid)}  # type: dict[int, list[float]]
    for e in SideEffect.objects.using(backend).all():
        started = long_jobs.get(id=e.job_id).started_at
        assert started is not None
        by[e.pid].append(e.host_clock - started.timestamp())
    seen_skew = sum(by[skewed.pid]) / max(1, len(by[skewed.pid]))
    latest = long_jobs.aggregate(m=Max("attempts"))["m"]
    report(f"clock-skew[{skew:+d} s]", skewed_worker_ran=f"{len(by[skewed.pid])} of {LONG}",
           its_clock=f"{seen_skew:+.0f} s off the database's", early_rescues=rescued,
           early_runs=early, delayed_still_pending=f"{count(backend, 'pending')} of {DELAYED}")  # fmt: skip
    assert len(by[skewed.pid]) == len(by[honest.pid]) == LONG // 2
    assert abs(seen_skew - skew) < 30, "the worker's clock was not skewed"
    assert all(abs(d) < 30 for d in by[honest.pid])
    assert stalls == 0 and rescued == 0 and latest == 1
    assert early == 0
    assert skewed.stop() == 0 and honest.stop() == 0
