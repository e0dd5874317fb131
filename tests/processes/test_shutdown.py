"""SIGTERM / SIGINT: stop leasing, give in-flight handlers the grace period, release
the rest with their attempt given back; a second signal stops at once."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from django_blamequeue import queue
from django_blamequeue.models import Job
from tests.procapp.jobs import QUEUE
from tests.procapp.models import SideEffect, Write

from .conftest import Processes, Report, count, effects, engine, redeliveries, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

IN_FLIGHT = 20
JOB_SECONDS = 10


def test_sigterm_releases_what_outlives_the_grace_and_each_job_runs_once_elsewhere(
    backend: str, processes: Processes, report: Report
) -> None:
    first = processes.worker(
        backend, "--concurrency", str(IN_FLIGHT), "--grace", "2", "--lease", "30", "--no-sweep"
    )
    first.wait_started()
    queue.enqueue_many(
        QUEUE, [{"sleep": JOB_SECONDS}] * IN_FLIGHT, name="procapp.effect", backend=backend
    )
    wait_for(lambda: count(backend, "inflight") == IN_FLIGHT, 30, "20 jobs in flight")
    sent = time.monotonic()
    first.signal(signal.SIGTERM)
    code = first.wait(10)
    exited_in = time.monotonic() - sent
    assert code == 0, first.tail()
    jobs = Job.objects.using(backend).filter(queue=QUEUE)
    released = jobs.filter(state="pending", attempts=0, lease_token=None).count()
    assert effects(backend) == 0
    # What the operator reads: the summary counts them, and each one has its line.
    assert f" released {IN_FLIGHT} " in first.stdout().splitlines()[-1], first.tail()
    lines = [line for line in first.stderr().splitlines() if "released: back to pending" in line]
    ids = set(jobs.values_list("id", flat=True))
    assert len(lines) == IN_FLIGHT, first.tail()
    assert {line.split("job ", 1)[1].split(" ", 1)[0] for line in lines} == ids
    assert all(
        "(procapp.effect) on " in line and "attempt 1/" in line and "given back" in line
        for line in lines
    )

    second = processes.worker(
        backend, "--concurrency", str(IN_FLIGHT), "--lease", "30", "--no-sweep"
    )
    wait_for(lambda: count(backend, "done") == IN_FLIGHT, 60, "the released jobs to run")
    runs = set(SideEffect.objects.using(backend).values_list("pid", flat=True))
    attempts = set(jobs.values_list("attempts", flat=True))
    report(
        f"sigterm[{engine(backend)}]",
        in_flight=f"{IN_FLIGHT} jobs of {JOB_SECONDS} s",
        grace="2 s",
        exited_in=f"{exited_in:.1f} s",
        released_with_attempts_unchanged=released,
        run_once_elsewhere=effects(backend),
    )
    assert exited_in <= 3.0
    assert released == IN_FLIGHT
    assert runs == {second.pid} and attempts == {1} and redeliveries(backend) == []
    assert second.stop() == 0


def test_a_second_signal_stops_at_once(backend: str, processes: Processes, report: Report) -> None:
    worker = processes.worker(backend, "--concurrency", "4", "--grace", "30", "--no-sweep")
    worker.wait_started()
    queue.enqueue_many(QUEUE, [{"sleep": JOB_SECONDS}] * 4, name="procapp.effect", backend=backend)
    wait_for(lambda: count(backend, "inflight") == 4, 30, "4 jobs in flight")
    worker.signal(signal.SIGTERM)
    wait_for(lambda: "signal again to stop now" in worker.stderr(), 10, "the first signal")
    sent = time.monotonic()
    worker.signal(signal.SIGINT)
    code = worker.wait(10)
    exited_in = time.monotonic() - sent
    assert code == 0, worker.tail()
    released = Job.objects.using(backend).filter(queue=QUEUE, state="pending", attempts=0)
    report(
        f"second-signal[{engine(backend)}]",
        grace="30 s",
        exited_in=f"{exited_in:.1f} s after the second signal",
        released=released.count(),
    )
    assert exited_in <= 2.0  # "at once": far below the 30 s grace (teardown alone is ~0.4 s)
    assert released.count() == 4 and effects(backend) == 0


@pytest.mark.parametrize("backend", ["default"], indirect=True, ids=["sqlite"])
def test_on_sqlite_a_second_signal_interrupts_a_running_atomic_job_and_exits_0(
    backend: str, processes: Processes, report: Report, tmp_path: Path
) -> None:
    """As the exit-status table says: the atomic handler (working in short steps) is
    interrupted like any other, its transaction rolls back, and the write lock it held is
    free for the release of every job."""
    worker = processes.worker(backend, "--concurrency", "2", "--grace", "30", "--no-sweep")
    worker.wait_started()
    queue.enqueue(QUEUE, {"sleep": 30}, name="procapp.effect", backend=backend)
    wait_for(lambda: count(backend, "inflight") == 1, 30, "the plain job in flight")
    mark = tmp_path / "written"  # the handler's write is done: its transaction holds the lock
    queue.enqueue(
        QUEUE, {"sleep": 30, "mark": str(mark)}, name="procapp.atomic_write", backend=backend
    )
    wait_for(mark.exists, 30, "the atomic job's write")
    worker.signal(signal.SIGTERM)
    wait_for(lambda: "signal again to stop now" in worker.stderr(), 10, "the first signal")
    sent = time.monotonic()
    worker.signal(signal.SIGINT)
    code = worker.wait(15)
    exited_in = time.monotonic() - sent
    assert code == 0, worker.tail()
    released = Job.objects.using(backend).filter(queue=QUEUE, state="pending", attempts=0)
    writes = Write.objects.using(backend).filter(tag="atomic").count()
    report(
        "second-signal, atomic job running[sqlite]",
        exited_in=f"{exited_in:.1f} s after the second signal",
        released=released.count(),
        atomic_writes_kept=writes,
    )
    assert released.count() == 2 and effects(backend) == 0
    assert writes == 0  # the interrupted atomic attempt's write rolled back with it
    assert exited_in <= 2.0  # at once: far below the 30 s grace and the 30 s handlers
