"""Limits and pause across worker processes, under SIGKILL.

Every run of ``procapp.run`` records its start and end (``Run``, the host clock: one host, so
every worker shares it); a run whose worker was killed ends at the kill. Figures:

- key concurrency: 4 workers × 8 slots drain 2,000 jobs over 50 keys with ``key_concurrency=1``
  while a random worker is SIGKILLed every second: *overlaps* = two runs of one key that were
  running at once; *lost* and *done twice* as in test_chaos.py;
- global concurrency: the most runs ever running at once under ``concurrency=3``;
- rate: the most starts (the engine's ``started_at``: claims) in any window of one second
  under ``rate_limit=(20, 1)``, and the most handler starts (``Run.started``) with the delay
  from claim to handler start;
- pause under load: claims after ``pause()`` returned (from the engine's ``started_at``), how
  soon each worker said so in its log, how long the jobs in flight took to finish.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections import defaultdict
from datetime import datetime

import pytest

from django_blamequeue import queue
from django_blamequeue.models import Job
from tests.procapp.jobs import QUEUE
from tests.procapp.models import Run, SideEffect

from .conftest import Proc, Processes, Report, count, engine, redeliveries, states, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

LEASE = "2"
OVERRIDES = {"MAX_STALLED_COUNT": 10_000, "SWEEP_INTERVAL": 0.5}
BACKENDS = [pytest.param("postgres", id="postgres")]


def workers(processes: Processes, backend: str, n: int = 4, slots: int = 8) -> list[Proc]:
    def spawn() -> Proc:
        return processes.worker(
            backend,
            "--concurrency",
            str(slots),
            "--lease",
            LEASE,
            "--poll",
            "0.2",
            overrides=OVERRIDES,
        )

    pool = [spawn() for _ in range(n)]
    for w in pool:
        w.wait_started(60)
    return pool


def intervals(db: str, killed: dict[int, float]) -> list[tuple[float, float, str | None]]:
    """(start, end, key) of every run; a run cut short by a SIGKILL ends at the kill."""
    found = []
    for r in Run.objects.using(db).all():
        end = r.ended if r.ended is not None else killed.get(r.pid, float("inf"))
        found.append((r.started, end, r.key))
    return found


def most_at_once(spans: list[tuple[float, float, str | None]]) -> int:
    edges = sorted([(s, 1) for s, _, _ in spans] + [(e, -1) for _, e, _ in spans])
    running = peak = 0
    for _, step in edges:  # an end sorts before a start at the same instant
        running += step
        peak = max(peak, running)
    return peak


def enqueue(backend: str, n: int, *, keys: int = 0, sleep: float = 0.0) -> None:
    payloads = [{"key": f"k{i % keys}" if keys else None, "sleep": sleep} for i in range(n)]
    queue.enqueue_many(QUEUE, payloads, name="procapp.run", backend=backend, max_attempts=10_000)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_key_concurrency_holds_through_sigkill_chaos(
    backend: str, processes: Processes, report: Report
) -> None:
    n_jobs, n_keys = 2_000, 50
    queue.set_limits(QUEUE, key_concurrency=1, backend=backend)
    enqueue(backend, n_jobs, keys=n_keys, sleep=0.02)
    pool = workers(processes, backend)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    killed: dict[int, float] = {}
    start = time.monotonic()
    while count(backend, "done") < n_jobs:
        assert time.monotonic() - start < 150, f"not drained (seed {seed}): {states(backend)}"
        time.sleep(1.0)
        i = rng.randrange(len(pool))
        if not pool[i].started():
            continue
        pool[i].kill()
        killed[pool[i].pid] = time.time()
        pool[i] = processes.worker(
            backend, "--concurrency", "8", "--lease", LEASE, "--poll", "0.2", overrides=OVERRIDES
        )
    elapsed = time.monotonic() - start
    for w in pool:
        w.kill()

    by_key: dict[str | None, list[tuple[float, float]]] = defaultdict(list)
    for s, e, key in intervals(backend, killed):
        by_key[key].append((s, e))
    overlaps = 0
    for spans in by_key.values():
        latest_end = float("-inf")
        for s, e in sorted(spans):
            overlaps += s < latest_end
            latest_end = max(latest_end, e)
    done_ids = set(Job.objects.using(backend).filter(state="done").values_list("id", flat=True))
    effect_ids = set(SideEffect.objects.using(backend).values_list("job_id", flat=True))
    again = redeliveries(backend)
    done_twice = [r for r in again if r.first_pid not in killed]
    report(
        f"key concurrency[{engine(backend)}]",
        jobs=n_jobs,
        keys=n_keys,
        workers="4 × 8 slots",
        kills=len(killed),
        overlaps_within_a_key=overlaps,
        lost=n_jobs - len(done_ids & effect_ids),
        done_twice=len(done_twice),
        redelivered_after_a_kill=len(again) - len(done_twice),
        most_runs_of_one_key_at_once=max(
            most_at_once([(s, e, k) for s, e in v]) for k, v in by_key.items()
        ),
        seed=str(seed),
        s=elapsed,
    )
    assert overlaps == 0
    assert done_ids == effect_ids and len(done_ids) == n_jobs
    assert done_twice == []
    assert len(killed) >= 3


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_global_concurrency_limit_is_never_exceeded(
    backend: str, processes: Processes, report: Report
) -> None:
    n_jobs = 150
    queue.set_limits(QUEUE, concurrency=3, backend=backend)
    enqueue(backend, n_jobs, sleep=0.05)
    start = time.monotonic()
    workers(processes, backend)
    wait_for(lambda: count(backend, "done") == n_jobs, 120, "drained")
    peak = most_at_once(intervals(backend, {}))
    report(
        f"concurrency=3[{engine(backend)}]",
        jobs=n_jobs,
        workers="4 × 8 slots",
        most_running_at_once=peak,
        s=time.monotonic() - start,
    )
    assert peak <= 3
    assert peak == 3, "the limit is a cap, not a serialisation: 3 ran at once"


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_rate_limit_holds_in_every_window_across_workers(
    backend: str, processes: Processes, report: Report
) -> None:
    n_jobs, most, per = 120, 20, 1.0
    queue.set_limits(QUEUE, rate_limit=(most, per), backend=backend)
    enqueue(backend, n_jobs)
    workers(processes, backend)
    wait_for(lambda: count(backend, "done") == n_jobs, 120, "drained")
    starts = sorted(
        t.timestamp()
        for t in Job.objects.using(backend).filter(queue=QUEUE).values_list("started_at", flat=True)
    )
    worst = in_any_window(starts, per)
    span = starts[-1] - starts[0]
    # What an API behind the limit sees: the handlers' own starts, each some dispatch delay
    # (a free thread, the GIL, a busy machine) after its claim.
    claimed = dict(Job.objects.using(backend).filter(queue=QUEUE).values_list("id", "started_at"))
    runs = list(Run.objects.using(backend).values_list("job_id", "started"))
    delays = sorted(started - claimed[job_id].timestamp() for job_id, started in runs)
    median, jitter = delays[len(delays) // 2], delays[-1]
    handler_worst = in_any_window(sorted(started for _, started in runs), per)
    report(
        f"rate 20/s[{engine(backend)}]",
        jobs=n_jobs,
        workers="4 × 8 slots",
        most_starts_in_any_1_s_window=worst,
        rate=f"{(n_jobs - most) / span:.1f}/s after the first window",
        most_handler_starts_in_any_1_s_window=handler_worst,
        claim_to_handler_ms=f"median {1000 * median:.0f}, max {1000 * jitter:.0f}",
    )
    assert worst <= most
    # The documented bound in handler starts: the claims of a window stretched by the jitter.
    assert handler_worst <= most * math.ceil((per + jitter) / per)
    assert (n_jobs - most) / span > 0.8 * most / per, "the limit is a rate, not a trickle"


def in_any_window(times: list[float], per: float) -> int:
    """The most of the sorted ``times`` within any window of ``per`` seconds."""
    return max(sum(1 for t in times[i:] if t - s < per) for i, s in enumerate(times))


LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) WARNING .*queue 'proc' is paused")


def noticed(proc: Proc) -> float | None:
    """When the worker logged that the queue is paused (its log line's time), or None."""
    for line in proc.stderr().splitlines():
        found = LOG_TIME.match(line)
        if found:
            stamp = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
            return stamp + int(found.group(2)) / 1000
    return None


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_pause_under_load_stops_every_claim_at_once(
    backend: str, processes: Processes, report: Report
) -> None:
    n_jobs = 1_200
    enqueue(backend, n_jobs, sleep=0.02)
    pool = workers(processes, backend)
    wait_for(lambda: count(backend, "done") >= 200, 60, "under load")
    in_flight = count(backend, "inflight")
    queue.pause(QUEUE, backend=backend, reason="fault test")
    paused_at = time.time()
    drained = wait_for(lambda: count(backend, "inflight") == 0, 30, "in-flight jobs finished")
    time.sleep(1.0)  # a second more of polls and wake-ups: still nothing claimed
    jobs = Job.objects.using(backend).filter(queue=QUEUE).exclude(started_at=None)
    after = sum(1 for t in jobs.values_list("started_at", flat=True) if t.timestamp() > paused_at)
    heard = [t - paused_at for p in pool if (t := noticed(p)) is not None]
    waiting = count(backend, "pending")
    queue.resume(QUEUE, backend=backend)
    wait_for(lambda: count(backend, "done") == n_jobs, 120, "drained after resume")
    report(
        f"pause under load[{engine(backend)}]",
        in_flight_at_the_pause=in_flight,
        claims_after_the_pause=after,
        finished_in_flight_within=f"{drained:.2f} s",
        workers_logged_it_within=f"{max(heard) * 1000:.0f} ms" if heard else "never",
        pending_while_paused=waiting,
    )
    assert after == 0
    assert len(heard) == len(pool), "every worker says its queue is paused"
    assert waiting > 0
