"""Redis going away under running workers, and workers killed while they drain on Redis.

Each test runs a redis-server of its own (so it can be SIGKILLed, stopped and restarted) and
``runworker`` subprocesses pointed at it; ``procapp.redis_effect`` stores each job's effect
under its unique id in the test database, so a job done twice shows as a ``Redelivery``.

Figures printed: how many acknowledged enqueues a SIGKILL of Redis lost with ``appendonly no``
and with AOF ``everysec`` (and over what window before the kill), how long workers took to
reconnect, what the circuit breaker did while Redis was stopped, and the chaos counts.
"""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

import pytest
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.redis import RedisBackend
from django_blamequeue.exceptions import ErrorCode, QueueError
from tests.backends.redis_support import invariant_problems, own_redis
from tests.procapp.jobs import QUEUE
from tests.procapp.models import Redelivery, SideEffect

from .conftest import Proc, Processes, Report, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

HANDLER = "procapp.redis_effect"
# Stalls are expected here (killed workers, a vanished server): never a reason to give up.
OVERRIDES = {"MAX_STALLED_COUNT": 10_000, "SWEEP_INTERVAL": 0.5}


def point_at(settings: SettingsWrapper, server: Any) -> RedisBackend:
    """The "redis" backend of this process on ``server``, with the workers' key prefix."""
    entry = {
        "PROTOCOL": "redis",
        "URL": server.url,
        "KEY_PREFIX": f"bq-{os.environ['BLAMEQUEUE_TEST_RUN']}",
    }
    settings.BLAMEQUEUE = {
        **settings.BLAMEQUEUE,
        "BACKENDS": {**settings.BLAMEQUEUE["BACKENDS"], "redis": entry},
    }
    backend = get_backend("redis")
    assert isinstance(backend, RedisBackend)
    return backend


def env(server: Any) -> dict[str, str]:
    return {"BLAMEQUEUE_TEST_REDIS_URL": server.url}


def answered(fn: Any, timeout: float = 10.0) -> Any:
    """``fn()`` once the server answers again (the first calls after a restart may fail)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except QueueError:
            assert time.monotonic() < deadline, "the restarted server never answered"
            time.sleep(0.05)


def counts(backend: RedisBackend) -> dict[str, int]:
    for s in backend.stats():
        if s.queue == QUEUE:
            return {k: v for k, v in s.counts.items() if v}
    return {}


def done(backend: RedisBackend) -> int:
    assert backend.resilience is not None
    return answered(lambda: backend.resilience.call(lambda: counts(backend).get("done", 0)))  # type: ignore[union-attr]


def effects_of(ids: set[str]) -> set[str]:
    stored = SideEffect.objects.using("default").values_list("job_id", flat=True)
    return set(stored) & ids


# -- (1) SIGKILL: the loss window of acknowledged enqueues ---------------------------------------
@pytest.mark.parametrize("appendonly", ["no", "everysec"])
def test_redis_sigkilled_loses_acknowledged_enqueues_only_without_an_append_only_file(
    appendonly: str, settings: SettingsWrapper, processes: Processes, report: Report
) -> None:
    with own_redis(appendonly=appendonly) as server:
        b = point_at(settings, server)
        worker = processes.worker(
            "redis", "--concurrency", "4", "--poll", "1", extra_env=env(server), overrides=OVERRIDES
        )
        worker.wait_started()
        acked: list[tuple[str, float]] = []
        refused: list[str] = []

        def produce() -> None:  # one enqueue after the other, until the server is gone
            while True:
                try:
                    job = queue.enqueue("unconsumed", {"n": len(acked)}, backend="redis")
                except QueueError as exc:
                    refused.append(exc.code)
                    return
                acked.append((job.job_id, time.monotonic()))

        producer = threading.Thread(target=produce)
        producer.start()
        wait_for(lambda: len(acked) >= 1500, 30, "1500 acknowledged enqueues")
        killed_at = time.monotonic()
        server.stop(kill=True)
        producer.join(30)
        rate = len(acked) / (acked[-1][1] - acked[0][1])
        server.start()  # replays the AOF, if there is one
        restarted_at = time.monotonic()

        def present(job_id: str) -> bool:
            return bool(b.client.exists(b.keys.job(job_id)))

        missing = answered(lambda: [(j, t) for j, t in acked if not present(j)])
        window = killed_at - min(t for _, t in missing) if missing else 0.0
        problems = invariant_problems(b)

        probe = answered(lambda: queue.enqueue(QUEUE, {}, name=HANDLER, backend="redis"))
        wait_for(lambda: bool(effects_of({probe.job_id})), 15, "a job done after the restart")
        reconnect = time.monotonic() - restarted_at
        report(
            f"redis-sigkill[appendonly {appendonly}]",
            acknowledged_enqueues=len(acked),
            at=f"{rate:,.0f}/s",
            lost=len(missing),
            oldest_lost_acked=f"{window:.2f} s before the kill",
            worker_back_after=f"{reconnect:.1f} s",
            key_invariants="ok" if not problems else f"{len(problems)} broken",
        )
        assert refused == [ErrorCode.BACKEND_UNAVAILABLE]
        if appendonly == "no":  # nothing persisted: every acknowledged enqueue is gone
            assert len(missing) == len(acked)
        else:  # everysec: at most about a second of writes (none, unless the OS crashed too)
            assert window <= 1.5, f"{len(missing)} lost over {window:.2f} s"
        assert problems == [], problems[:10]
        assert reconnect < 10.0
        assert worker.alive() and worker.stop() == 0


# -- (2) stopped: the breaker opens, workers back off and recover --------------------------------
def test_a_stopped_redis_opens_the_breaker_and_workers_recover_with_no_job_lost(
    settings: SettingsWrapper, processes: Processes, report: Report
) -> None:
    n_jobs = 1_500
    down_for = 3.0
    with own_redis(appendonly="everysec") as server:
        b = point_at(settings, server)
        ids = {
            j.job_id
            for j in queue.enqueue_many(
                QUEUE, [{"sleep": 0.01}] * n_jobs, name=HANDLER, backend="redis", max_attempts=100
            )
        }
        workers = [
            processes.worker(
                "redis",
                "--concurrency",
                "4",
                "--poll",
                "1",
                "--lease",
                "10",
                extra_env=env(server),
                overrides=OVERRIDES,
            )
            for _ in range(2)
        ]
        wait_for(lambda: done(b) >= n_jobs * 0.4, 60, "40 % done")
        at = done(b)
        server.stop()  # SIGTERM: Redis writes its AOF and exits
        stopped_at = time.monotonic()
        codes, took = [], []
        for _ in range(8):
            started = time.monotonic()
            try:
                queue.enqueue(QUEUE, {}, name=HANDLER, backend="redis")
            except QueueError as exc:
                codes.append(exc.code)
            took.append(time.monotonic() - started)
        breaker = {x["name"]: x["breaker_state"] for x in queue.list_backends()}["redis"]
        time.sleep(max(0.0, down_for - (time.monotonic() - stopped_at)))  # the outage itself
        server.start()
        restarted_at = time.monotonic()
        before = done(b)
        first = wait_for(lambda: done(b) > before, 30, "a job done after the restart")
        wait_for(lambda: done(b) == n_jobs, 120, "every job done")
        drained = time.monotonic() - restarted_at
        stored = effects_of(ids)
        again = Redelivery.objects.using("default").filter(job_id__in=ids).count()
        backed_off = processes.stderr_count("retrying in")
        report(
            "redis-stopped[everysec]",
            jobs=n_jobs,
            stopped_at=f"{at} done",
            down=f"{down_for:.0f} s",
            enqueue_while_down=f"{len(codes)}× BACKEND_UNAVAILABLE",
            breaker=breaker,
            failing_fast_after_it_opened=f"{1000 * max(took[5:]):.1f} ms",
            worker_backoff_warnings=backed_off,
            first_job_done_after=f"{first:.1f} s",
            drained_after=f"{drained:.1f} s",
            lost=n_jobs - len(stored),
            done_twice=again,
        )
        assert codes == [ErrorCode.BACKEND_UNAVAILABLE] * 8
        assert breaker == "open" and max(took[5:]) < 0.05
        assert backed_off > 0
        assert len(stored) == n_jobs and again == 0
        assert counts(b) == {"done": n_jobs} and invariant_problems(b) == []
        assert all(w.alive() for w in workers), processes.tails()
        assert all(w.stop() == 0 for w in workers)


# -- (3) chaos: workers SIGKILLed at random while they drain ------------------------------------
def test_workers_killed_at_random_on_redis_lose_no_job_and_do_none_twice(
    settings: SettingsWrapper, processes: Processes, report: Report
) -> None:
    n_jobs, n_workers = 3_000, 3
    with own_redis(appendonly="everysec") as server:
        b = point_at(settings, server)
        ids = {
            j.job_id
            for j in queue.enqueue_many(
                QUEUE,
                [{"i": i} for i in range(n_jobs)],
                name=HANDLER,
                backend="redis",
                max_attempts=10_000,
            )
        }
        seed = random.randrange(1 << 30)
        rng = random.Random(seed)

        def spawn() -> Proc:
            return processes.worker(
                "redis",
                "--concurrency",
                "4",
                "--lease",
                "2",
                "--poll",
                "0.5",
                extra_env=env(server),
                overrides=OVERRIDES,
            )

        pool = [spawn() for _ in range(n_workers)]
        killed: set[int] = set()
        spared = 0
        start = time.monotonic()
        while done(b) < n_jobs:
            assert time.monotonic() - start < 240, f"not drained (seed {seed}): {counts(b)}"
            time.sleep(0.5)  # the chaos cadence
            for w in pool:
                assert w.alive(), f"{w.name} died on its own:\n{w.tail()}"
            i = rng.randrange(len(pool))
            if not pool[i].started():
                spared += 1  # still starting: it holds no lease
                continue
            pool[i].kill()
            killed.add(pool[i].pid)
            pool[i] = spawn()
        elapsed = time.monotonic() - start
        for w in pool:
            w.kill()
        stored = effects_of(ids)
        done_ids = {raw.decode() for raw in b.client.zrange(b.keys.queue(QUEUE, "done"), 0, -1)}
        again = list(Redelivery.objects.using("default").filter(job_id__in=ids))
        done_twice = [r for r in again if r.first_pid not in killed]
        pipe = b.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hget(b.keys.job(job_id), "stalls")
        rescued = sum(int(n or 0) for n in pipe.execute())
        report(
            "chaos[redis]",
            jobs=n_jobs,
            workers=n_workers,
            kills=len(killed),
            spared_while_starting=spared,
            lost=n_jobs - len(done_ids & stored),
            done_twice=len(done_twice),
            redelivered_after_a_kill=len(again) - len(done_twice),
            leases_rescued=rescued,
            seed=str(seed),
            s=elapsed,
        )
        assert counts(b) == {"done": n_jobs} and done_ids == ids
        assert stored == ids
        assert done_twice == [], [(r.job_id, r.first_pid, r.pid) for r in done_twice]
        assert invariant_problems(b) == []
        assert len(killed) >= 3 and rescued > 0, "no kill caught a worker holding leases"
