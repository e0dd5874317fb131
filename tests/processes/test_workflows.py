"""Durable workflows against real worker processes on PostgreSQL (docs/workflows.md).

The proof: 200 ten-step workflows whose steps write rows while a worker is SIGKILLed every
0.5 s. Every atomic step's row exists exactly once; a plain step's function ran at most once
per lease its job lost; every workflow finishes. Then a re-run from step 5 runs steps 5..10
only, and a workflow parked in one process waiting for an event is woken by an event sent
from this one.
"""

from __future__ import annotations

import random
import time

import pytest
from django.db.models import Count

from django_blamequeue import queue
from django_blamequeue.models import Job
from tests.procapp.jobs import QUEUE
from tests.procapp.models import Write

from .conftest import Proc, Processes, Report, states, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

DB = "postgres"
N_WORKFLOWS = 200
KILL_EVERY = 0.5
OVERRIDES = {"MAX_STALLED_COUNT": 10_000, "SWEEP_INTERVAL": 0.5}


@pytest.fixture
def postgres() -> str:
    from tests.conftest import need_server

    need_server(DB)
    return DB


def writes_per_step(job_ids: list[str]) -> dict[tuple[str, str], int]:
    rows = (
        Write.objects.using(DB)
        .filter(job_id__in=job_ids)
        .values_list("job_id", "tag")
        .annotate(n=Count("id"))
        .values_list("job_id", "tag", "n")
    )
    return {(j, t): n for j, t, n in rows}


def test_workflows_whose_worker_is_killed_every_half_second_run_each_atomic_step_once(
    postgres: str, processes: Processes, report: Report
) -> None:
    ids = [
        j.job_id
        for j in queue.enqueue_many(QUEUE, [{}] * N_WORKFLOWS, name="procapp.ten_steps", backend=DB)
    ]
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)

    def spawn() -> Proc:
        return processes.worker(
            DB, "--concurrency", "6", "--lease", "2", "--poll", "0.5", overrides=OVERRIDES
        )

    pool = [spawn() for _ in range(3)]
    kills = 0
    start = time.monotonic()
    while Job.objects.using(DB).filter(id__in=ids, state="done").count() < N_WORKFLOWS:
        # 50-90 s on two shared cores; the margin is for a loaded CI machine
        assert time.monotonic() - start < 200, f"not drained (seed {seed}): {states(DB)}"
        time.sleep(KILL_EVERY)
        i = rng.randrange(len(pool))
        if not pool[i].started():
            continue  # still starting: it holds no lease
        pool[i].kill()
        kills += 1
        pool[i] = spawn()
    elapsed = time.monotonic() - start
    stalls = dict(Job.objects.using(DB).filter(id__in=ids).values_list("id", "stalls"))
    per_step = writes_per_step(ids)
    atomic = [per_step.get((j, f"s{i}"), 0) for j in ids for i in range(0, 10, 2)]
    plain_over = [
        (j, i, per_step.get((j, f"s{i}"), 0), stalls[j])
        for j in ids
        for i in range(1, 10, 2)
        if not 1 <= per_step.get((j, f"s{i}"), 0) <= 1 + stalls[j]
    ]
    plain_again = sum(per_step.get((j, f"s{i}"), 0) - 1 for j in ids for i in range(1, 10, 2))
    report(
        "workflow-kill-chaos[postgres]",
        workflows=f"{N_WORKFLOWS} × 10 steps",
        kills=kills,
        lease_losses=sum(stalls.values()),
        atomic_rows_not_once=sum(1 for n in atomic if n != 1),
        plain_steps_run_again=plain_again,
        seed=str(seed),
        s=elapsed,
    )
    assert Job.objects.using(DB).filter(id__in=ids, state="done").count() == N_WORKFLOWS
    assert atomic == [1] * len(atomic)  # every atomic step's row exactly once
    assert plain_over == []  # each plain step ran at most once per lease its job lost
    assert kills >= 3

    # A re-run from step 5 runs steps 5..10 (s4..s9) only.
    for w in pool:
        w.kill()
    again = queue.rerun_workflow(ids[0], 5, backend=DB, user="chaos")
    worker = spawn()
    wait_for(lambda: Job.objects.using(DB).get(id=again.job_id).state == "done", 30, "the re-run")
    rerun_steps = sorted(t for (j, t) in writes_per_step([again.job_id]) if j == again.job_id)
    assert rerun_steps == [f"s{i}" for i in range(4, 10)]
    assert worker.stop() == 0


def test_a_workflow_parked_in_a_worker_process_is_woken_by_an_event_sent_from_another(
    postgres: str, processes: Processes, report: Report
) -> None:
    worker = processes.worker(DB, "--concurrency", "2", "--poll", "0.5")
    worker.wait_started()
    job_id = queue.enqueue(QUEUE, {"key": "k-1"}, name="procapp.await_event", backend=DB).job_id
    wait_for(lambda: bool(queue.workflow_steps(job_id, DB)), 30, "the workflow to record its wait")
    # The waiting step commits before the handler parks; the park's ack (back to pending)
    # follows it in the worker's next round.
    wait_for(
        lambda: Job.objects.using(DB).get(id=job_id).state == "pending", 30, "the workflow to park"
    )
    sent = time.monotonic()
    queue.send_event("proc.go", key="k-1", payload={"go": True}, backend=DB)
    took = wait_for(
        lambda: Job.objects.using(DB).get(id=job_id).state == "done", 30, "the woken workflow"
    )
    result = queue.get_job(job_id, backend=DB)
    assert result is not None and result.result["got"] == {"go": True}
    assert result.result["pid"] == worker.pid
    report("workflow-event-across-processes[postgres]", woken_in=f"{took * 1000:.0f} ms")
    assert time.monotonic() - sent < 30
    assert worker.stop() == 0
