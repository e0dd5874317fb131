"""``runworker --processes N``: real worker processes under a supervisor that replaces one
that dies, recycles one past its bounds after its jobs finish, and stops them all on SIGTERM."""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Iterator

import pytest

from django_blamequeue import queue
from django_blamequeue.models import Job
from tests.procapp.jobs import QUEUE
from tests.procapp.models import SideEffect

from .conftest import Proc, Processes, Report, count, effects, redeliveries, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, databases="__all__"),
    pytest.mark.parametrize("backend", ["postgres"], indirect=True),
]

STARTED = re.compile(r"worker process (\d+) started \(pid (\d+)\)")


def started(sup: Proc) -> dict[int, int]:
    """The pid each worker process number has now, from the supervisor's lines."""
    return {int(n): int(pid) for n, pid in STARTED.findall(sup.stdout())}


def banners(sup: Proc) -> int:
    """How many worker processes have printed their banner (consumer running)."""
    return len(re.findall(r"· runworker\n", sup.stdout()))


def alive(pid: int) -> bool:
    """Running (a zombie no one reaped yet has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def child_pids() -> Iterator[set[int]]:
    """Worker processes run in their own session: kill whatever a failed test left."""
    pids: set[int] = set()
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_killed_worker_process_is_replaced_and_sigint_stops_every_process_gracefully(
    backend: str, processes: Processes, report: Report, child_pids: set[int]
) -> None:
    sup = processes.worker(backend, "--processes", "2", "--concurrency", "2", "--no-sweep")
    wait_for(lambda: banners(sup) == 2, 30, "two worker processes running")
    first = started(sup)
    child_pids.update(first.values())
    assert "≤ " in sup.stdout() and "per database in all (2 × " in sup.stdout(), sup.tail()

    os.kill(first[1], signal.SIGKILL)
    wait_for(lambda: banners(sup) == 3, 30, "worker process 1 replaced and running")
    second = started(sup)
    child_pids.update(second.values())
    assert f"(pid {first[1]}) was killed by SIGKILL: starting a new one" in sup.stdout()
    assert second[2] == first[2]

    queue.enqueue_many(QUEUE, [{"i": i} for i in range(20)], name="procapp.effect", backend=backend)
    wait_for(lambda: count(backend, "done") == 20, 60, "20 jobs done by the processes")
    pids = set(SideEffect.objects.using(backend).values_list("pid", flat=True))
    assert pids <= set(second.values()) and effects(backend) == 20

    sup.signal(signal.SIGINT)  # Ctrl-C: forwarded once to each process, a graceful stop
    assert sup.wait(15) == 0, sup.tail()
    assert "SIGINT: stopping 2 worker process(es)" in sup.stdout(), sup.tail()
    assert sup.stdout().count("stopped: done") == 2, sup.tail()
    assert not any(alive(pid) for pid in second.values())
    report("supervisor[postgres]", killed=1, replaced=1, jobs_done_once=effects(backend))


def test_a_process_past_its_memory_bound_finishes_its_job_then_is_recycled(
    backend: str, processes: Processes, report: Report, child_pids: set[int]
) -> None:
    sup = processes.worker(
        backend, "--processes", "1", "--concurrency", "1", "--max-memory-per-process", "200"
    )
    wait_for(lambda: banners(sup) == 1, 30, "the worker process running")
    first = started(sup)[1]
    child_pids.add(first)
    hog = queue.enqueue(QUEUE, {"leak_mb": 200, "sleep": 2}, name="procapp.effect", backend=backend)
    wait_for(lambda: count(backend, "inflight") == 1, 30, "the leaking job running")
    rest = queue.enqueue_many(
        QUEUE, [{"i": i} for i in range(5)], name="procapp.effect", backend=backend
    )

    wait_for(lambda: count(backend, "done") == 6, 60, "every job done")
    child_pids.update(started(sup).values())
    by_job = dict(SideEffect.objects.using(backend).values_list("job_id", "pid"))
    assert by_job[hog.job_id] == first
    assert {by_job[j.job_id] for j in rest} == {started(sup)[1]} != {first}
    assert set(Job.objects.using(backend).values_list("attempts", flat=True)) == {1}
    assert redeliveries(backend) == []
    out = sup.stdout() + sup.stderr()
    assert "MB resident (--max-memory-per-process 200)" in out, sup.tail()
    assert f"worker process 1 (pid {first}) recycled: starting a new one" in out
    assert sup.stop() == 0
    report("recycle-memory[postgres]", leaked="200 MB", bound="200 MB", lost=0, run_twice=0)


def test_a_process_recycles_after_its_job_count_and_every_job_runs_once(
    backend: str, processes: Processes, report: Report, child_pids: set[int]
) -> None:
    queue.enqueue_many(QUEUE, [{"i": i} for i in range(6)], name="procapp.effect", backend=backend)
    sup = processes.worker(
        backend, "--processes", "1", "--concurrency", "2", "--max-jobs-per-process", "3"
    )
    wait_for(lambda: count(backend, "done") == 6, 60, "every job done")
    child_pids.update(started(sup).values())
    per_pid = list(SideEffect.objects.using(backend).values_list("pid", flat=True))
    assert len(per_pid) == 6 and redeliveries(backend) == []
    assert sorted(per_pid.count(pid) for pid in set(per_pid)) == [3, 3], per_pid
    wait_for(lambda: "recycled: starting a new one" in sup.stdout(), 10, "the recycle")
    assert sup.stop() == 0
    report("recycle-jobs[postgres]", jobs=6, processes=len(set(per_pid)), run_twice=0)


def test_worker_processes_stop_by_themselves_when_their_supervisor_is_killed(
    backend: str, processes: Processes, child_pids: set[int]
) -> None:
    sup = processes.worker(backend, "--processes", "2", "--concurrency", "1", "--no-sweep")
    wait_for(lambda: banners(sup) == 2, 30, "two worker processes running")
    pids = set(started(sup).values())
    child_pids.update(pids)
    sup.kill()
    wait_for(lambda: not any(alive(pid) for pid in pids), 15, "the orphans to stop")
    assert sup.stderr().count("the supervisor is gone: stopping") == 2, sup.tail()
