"""SIGKILL chaos: every 0.5 s a random worker is killed and a new one started while they drain
a queue.

Delivery is at least once: a worker killed after a handler stored its effect but before the
ack leaves a lease that expires, and the job runs again. ``procapp.effect`` is the idempotent
handler that calls for: the effect is stored under the job's unique id, fenced by the lease
token, so it is applied exactly once, and a redelivery finds it and records whose it found.

Figures: *lost* = jobs not done at the end, or done without their effect; *done twice* = a
job's work redone although the worker that did it was never killed (the queue handing a live
worker's job to another, or losing a live worker's ack); *redelivered after a kill* = the
expected at-least-once re-runs, each absorbed by the unique job id.
"""

from __future__ import annotations

import random
import time

import pytest
from django.db.models import Sum

from django_blamequeue import queue
from django_blamequeue.models import Job
from tests.procapp.jobs import QUEUE
from tests.procapp.models import SideEffect

from .conftest import Proc, Processes, Report, count, effects, engine, redeliveries, states

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

KILL_EVERY = 0.5  # seconds: the chaos cadence
LEASE = "2"  # seconds: short, so a killed worker's jobs come back quickly
# Stalls are the point here, not a reason to give up on a job.
OVERRIDES = {"MAX_STALLED_COUNT": 10_000, "SWEEP_INTERVAL": 0.5}
SCENARIOS = [
    pytest.param("default", 2, 1_000, id="sqlite"),
    pytest.param("postgres", 4, 5_000, id="postgres"),
]


@pytest.mark.parametrize(("backend", "n_workers", "n_jobs"), SCENARIOS, indirect=["backend"])
def test_workers_killed_at_random_lose_no_job_and_do_none_twice(
    backend: str, n_workers: int, n_jobs: int, processes: Processes, report: Report
) -> None:
    queue.enqueue_many(
        QUEUE,
        [{"i": i} for i in range(n_jobs)],
        name="procapp.effect",
        backend=backend,
        max_attempts=10_000,
    )
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)

    def spawn() -> Proc:
        return processes.worker(
            backend, "--concurrency", "4", "--lease", LEASE, "--poll", "0.5", overrides=OVERRIDES
        )

    pool = [spawn() for _ in range(n_workers)]
    killed: set[int] = set()
    spared = 0
    start = time.monotonic()
    deadline = start + 200
    while count(backend, "done") < n_jobs:
        assert time.monotonic() < deadline, f"not drained (seed {seed}): {states(backend)}"
        time.sleep(KILL_EVERY)
        for w in pool:
            assert w.alive(), f"{w.name} died on its own:\n{w.tail()}"
        i = rng.randrange(len(pool))
        if not pool[i].started():
            # Still starting: it holds no lease, and killing it again and again on a loaded
            # machine could leave the queue without a running worker at all. Spared.
            spared += 1
            continue
        pool[i].kill()
        killed.add(pool[i].pid)
        pool[i] = spawn()
    elapsed = time.monotonic() - start
    for w in pool:
        w.kill()  # some are still starting: SIGTERM would be no cleaner

    jobs = Job.objects.using(backend).filter(queue=QUEUE)
    done_ids = set(jobs.filter(state="done").values_list("id", flat=True))
    effect_ids = set(SideEffect.objects.using(backend).values_list("job_id", flat=True))
    lost = n_jobs - len(done_ids & effect_ids)
    again = redeliveries(backend)
    done_twice = [r for r in again if r.first_pid not in killed]
    rescued = jobs.aggregate(n=Sum("stalls"))["n"] or 0
    locked = processes.stderr_count("database is locked")
    report(
        f"chaos[{engine(backend)}]",
        jobs=n_jobs,
        workers=n_workers,
        kills=len(killed),
        spared_while_starting=spared,
        lost=lost,
        done_twice=len(done_twice),
        redelivered_after_a_kill=len(again) - len(done_twice),
        leases_rescued=rescued,
        database_is_locked_errors=locked,
        seed=str(seed),
        s=elapsed,
    )
    assert states(backend) == {"done": n_jobs}
    assert effects(backend) == n_jobs
    assert lost == 0
    assert done_twice == [], [(r.job_id, r.first_pid, r.pid) for r in done_twice]
    assert locked == 0, "a worker reported 'database is locked'"
    assert len(killed) >= 3 and rescued > 0, "no kill caught a worker holding leases"
