"""``@job(atomic=True)`` against real worker processes on PostgreSQL (docs/effects.md).

The proof: a worker frozen (SIGSTOP) after its handler wrote, past its lease; another worker
takes the job over and finishes it; the first is thawed (SIGCONT). With ``atomic=True`` the
job has exactly one set of writes; the same handler without it, two. Then SIGKILL chaos with
a side-effect table that has no unique constraint: atomic jobs get no duplicate write, and
the plain jobs' duplicates are printed beside them.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest
from django.db.models import Count

from django_blamequeue import audit, queue
from django_blamequeue.backends import get_backend
from django_blamequeue.models import AuditEvent, Job
from tests.procapp.jobs import QUEUE
from tests.procapp.models import Write

from .conftest import Proc, Processes, Report, states, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

DB = "postgres"


@pytest.fixture
def postgres() -> str:
    from tests.conftest import need_server

    need_server(DB)
    return DB


def job_state(job_id: str) -> str:
    state: str = Job.objects.using(DB).values_list("state", flat=True).get(id=job_id)
    return state


@pytest.mark.parametrize("atomic", [True, False], ids=["atomic", "plain"])
def test_a_frozen_worker_thawed_after_a_takeover_leaves_one_set_of_writes_only_if_atomic(
    postgres: str, atomic: bool, processes: Processes, report: Report, tmp_path: Path
) -> None:
    b = get_backend(DB)
    name = "procapp.atomic_write" if atomic else "procapp.plain_write"
    args = ("--concurrency", "1", "--lease", "2", "--no-sweep", "--poll", "0.2")
    stale = processes.worker(DB, *args)
    stale.wait_started()
    mark = tmp_path / "written"
    job_id = queue.enqueue(
        QUEUE, {"mark": str(mark), "sleep": 4.0}, name=name, backend=DB, max_attempts=5
    ).job_id
    wait_for(mark.exists, 30, "the first worker's write")
    stale.signal(signal.SIGSTOP)
    frozen_at = time.monotonic()
    expires = Job.objects.using(DB).values_list("lease_expires_at", flat=True).get(id=job_id)
    wait_for(lambda: b.now() > expires, 10, "the frozen worker's lease to expire")
    wait_for(lambda: b.rescue_expired(max_stalled=5).repended == 1, 10, "the rescue")
    taker = processes.worker(DB, *args)
    wait_for(lambda: job_state(job_id) == "done", 30, "the takeover")
    stale.signal(signal.SIGCONT)
    frozen_for = time.monotonic() - frozen_at
    wait_for(
        lambda: "LOCK_LOST" in stale.stderr() or "lost the lease" in stale.stderr(),
        15,
        "the thawed worker to notice its lease is gone",
    )
    written = list(
        Write.objects.using(DB).filter(job_id=job_id).order_by("id").values_list("attempt", "pid")
    )
    err = stale.stderr()
    how = "commit refused (LOCK_LOST)" if "LOCK_LOST" in err else "run abandoned on its lost lease"
    report(
        f"frozen-worker-effects[postgres, {'atomic' if atomic else 'plain'}]",
        frozen=f"{frozen_for:.1f} s (lease 2 s)",
        thawed_worker=how,
        sets_of_writes=len(written),
        by_attempts=str([a for a, _ in written]),
    )
    if atomic:
        assert written == [(2, taker.pid)]  # the frozen run's write was rolled back
        lost = AuditEvent.objects.using(DB).get(job_id=job_id, action=audit.LOCK_LOST)
        assert (lost.attempt, lost.data["rolled_back"]) == (1, True)
    else:
        assert [a for a, _ in written] == [1, 2]  # the frozen run's write stayed
    assert job_state(job_id) == "done"
    assert stale.stop() == 0 and taker.stop() == 0


KILL_EVERY = 0.5
N_JOBS = 300  # of each kind
OVERRIDES = {"MAX_STALLED_COUNT": 10_000, "SWEEP_INTERVAL": 0.5}


def duplicates(tag: str) -> tuple[int, int]:
    """(jobs written more than once, jobs never written) among the jobs of ``tag``."""
    per_job = dict(
        Write.objects.using(DB)
        .filter(tag=tag)
        .values_list("job_id")
        .annotate(n=Count("id"))
        .values_list("job_id", "n")
    )
    names = {"atomic": "procapp.atomic_write", "plain": "procapp.plain_write"}
    ids = set(Job.objects.using(DB).filter(name=names[tag]).values_list("id", flat=True))
    return sum(1 for n in per_job.values() if n > 1), len(ids - set(per_job))


def test_workers_killed_at_random_leave_no_duplicate_write_of_an_atomic_job(
    postgres: str, processes: Processes, report: Report
) -> None:
    """A write, then 50 ms of work, then the ack: a kill after the write and before the
    ack re-runs the job. A plain job's write is then doubled; an atomic job's was rolled
    back with its connection."""
    payload = {"sleep": 0.05, "always": True}
    for name in ("procapp.atomic_write", "procapp.plain_write"):
        queue.enqueue_many(QUEUE, [payload] * N_JOBS, name=name, backend=DB)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)

    def spawn() -> Proc:
        return processes.worker(
            DB, "--concurrency", "4", "--lease", "2", "--poll", "0.5", overrides=OVERRIDES
        )

    pool = [spawn() for _ in range(3)]
    kills = 0
    start = time.monotonic()
    while Job.objects.using(DB).filter(queue=QUEUE, state="done").count() < 2 * N_JOBS:
        assert time.monotonic() - start < 150, f"not drained (seed {seed}): {states(DB)}"
        time.sleep(KILL_EVERY)
        i = rng.randrange(len(pool))
        if not pool[i].started():
            continue  # still starting: it holds no lease
        pool[i].kill()
        kills += 1
        pool[i] = spawn()
    elapsed = time.monotonic() - start
    for w in pool:
        w.kill()
    atomic_twice, atomic_lost = duplicates("atomic")
    plain_twice, plain_lost = duplicates("plain")
    report(
        "kill-chaos-effects[postgres]",
        jobs=f"{N_JOBS} atomic + {N_JOBS} plain",
        kills=kills,
        atomic_jobs_written_twice=atomic_twice,
        plain_jobs_written_twice=plain_twice,
        jobs_never_written=atomic_lost + plain_lost,
        seed=str(seed),
        s=elapsed,
    )
    assert states(DB) == {"done": 2 * N_JOBS}
    assert atomic_twice == 0
    assert atomic_lost == plain_lost == 0
    assert kills >= 3
