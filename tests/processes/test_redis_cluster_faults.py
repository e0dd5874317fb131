"""A Redis Cluster primary fails over to its replica while workers drain a queue on it.

Each test runs a 6-node cluster of its own (tests/servers.py ``RedisClusterServer``, AOF
``everysec``, ``cluster-node-timeout`` 2 s) and two ``runworker`` subprocesses on the
``redis-cluster`` backend; ``procapp.redis_effect`` stores each job's effect under its id, so a
job done twice shows as a ``Redelivery``. The backend's keys share one hash tag, so one primary
holds them all: that is the primary the test fails over.

- ``failover``: ``CLUSTER FAILOVER`` on the replica (an operator's switch-over: the primary
  stops taking writes until its replica has caught up). Nothing may be lost or done twice.
- ``kill``: SIGKILL of the primary; the cluster promotes the replica after the node timeout.
  Replication is asynchronous: what the primary answered but had not sent to its replica is
  lost. An enqueue long before the kill is on the replica; an ack answered in the last moments
  may not be, and that job runs again once its lease runs out. The figures report both.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.redis import RedisBackend
from django_blamequeue.exceptions import QueueError
from tests.backends.redis_support import invariant_problems, own_cluster
from tests.procapp.jobs import QUEUE
from tests.procapp.models import Redelivery, SideEffect

from .conftest import Processes, Report, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

HANDLER = "procapp.redis_effect"
ALIAS = "redis-cluster"
OVERRIDES = {"MAX_STALLED_COUNT": 10_000, "SWEEP_INTERVAL": 0.5}
LEASE_S = 3


def point_at(settings: SettingsWrapper, server: Any) -> RedisBackend:
    """The "redis-cluster" backend of this process on ``server``, with the workers' prefix."""
    entry = {
        "PROTOCOL": "redis",
        "URL": server.url,
        "CLUSTER": True,
        "KEY_PREFIX": f"bqc-{os.environ['BLAMEQUEUE_TEST_RUN']}",
    }
    settings.BLAMEQUEUE = {
        **settings.BLAMEQUEUE,
        "BACKENDS": {**settings.BLAMEQUEUE["BACKENDS"], ALIAS: entry},
    }
    backend = get_backend(ALIAS)
    assert isinstance(backend, RedisBackend)
    return backend


def done(backend: RedisBackend, timeout: float = 20.0) -> int:
    """Jobs done, read through the breaker; retried while the cluster is failing over."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            for s in backend.resilience.call(backend.stats):  # type: ignore[union-attr]
                if s.queue == QUEUE:
                    return int(s.counts.get("done", 0))
            return 0
        except QueueError:
            assert time.monotonic() < deadline, "the cluster never answered again"
            time.sleep(0.1)


@pytest.mark.parametrize("how", ["failover", "kill"])
def test_a_primary_failing_over_mid_drain_loses_no_enqueued_job_and_workers_recover(
    how: str, settings: SettingsWrapper, processes: Processes, report: Report
) -> None:
    n_jobs = 800
    with own_cluster(appendonly="everysec") as cluster:
        b = point_at(settings, cluster)
        slot = b.client.keyslot(b.keys.prefix)
        ids = {
            j.job_id
            for j in queue.enqueue_many(
                QUEUE, [{"sleep": 0.002}] * n_jobs, name=HANDLER, backend=ALIAS, max_attempts=100
            )
        }
        workers = [
            processes.worker(
                ALIAS,
                "--concurrency",
                "8",
                "--lease",
                str(LEASE_S),
                "--poll",
                "0.5",
                extra_env={"BLAMEQUEUE_TEST_REDIS_CLUSTER_URL": cluster.url},
                overrides=OVERRIDES,
            )
            for _ in range(2)
        ]
        wait_for(lambda: done(b) >= n_jobs * 0.3, 60, "30 % done")
        primary = next(
            n["port"] for n in cluster.primaries() if any(_covers(r, slot) for r in n["slots"])
        )
        replica = cluster.replica_of(primary)
        at = done(b)
        started = time.monotonic()
        if how == "failover":
            assert cluster.cli(replica, "cluster", "failover").strip() == "OK"
        else:
            cluster.node(primary).stop(kill=True)
        promoted = wait_for(
            lambda: any(n["port"] == replica for n in cluster.primaries()), 30, "a promotion"
        )
        after = done(b)
        first = wait_for(lambda: done(b) > after, 30, "a job done after the promotion")
        wait_for(lambda: done(b) == n_jobs, 120, "every job done")
        drained = time.monotonic() - started
        stored = set(SideEffect.objects.using("default").values_list("job_id", flat=True)) & ids
        again = Redelivery.objects.using("default").filter(job_id__in=ids).count()
        problems = invariant_problems(b)
        report(
            f"redis-cluster-{how}[everysec]",
            jobs=n_jobs,
            at=f"{at} done",
            replica_promoted_after=f"{promoted:.1f} s",
            first_job_done_after_it=f"{first:.1f} s",
            drained_after=f"{drained:.1f} s",
            lost=n_jobs - len(stored),
            done_twice=again,
            key_invariants="ok" if not problems else f"{len(problems)} broken",
        )
        assert stored == ids, f"{n_jobs - len(stored)} enqueued jobs lost"
        assert problems == [], problems[:10]
        if how == "failover":  # the replica caught up before it took over: no ack was lost
            assert again == 0
        else:  # only acks answered in the replication lag: one round per worker at most
            assert again <= 8 * 2, f"{again} jobs ran twice"
        assert all(w.alive() for w in workers), processes.tails()
        assert all(w.stop() == 0 for w in workers)


def _covers(ranges: str, slot: int) -> bool:
    low, _, high = ranges.partition("-")
    return low.isdigit() and int(low) <= slot <= int(high or low)
