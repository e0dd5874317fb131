"""A worker outlives its engine's outage: the engine is paused (SIGSTOP) for longer than the
lease while the worker drains, then resumed (SIGCONT), and the same worker claims again and
drains the rest — nothing lost, nothing failed, no fresh worker needed.

The pause is the outage an operator meets most: a server that stops answering without closing
its connections (a VM frozen, a network partition, ``kill -STOP``). moto_server for SQS,
redis-server for Redis, and for PostgreSQL the server processes of the worker's own
connections (so this test's own connection still reads the outcome). Every lease the worker
held ran out meanwhile; its jobs come back to it with a stall, on probation, and may meet runs
of theirs that finished during the pause. A worker that held such a run back to run alone used
to stop claiming for good (``in flight 0/8 · 0.0/s``) on SQS.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.base import Backend
from django_blamequeue.worker import fleet
from tests.backends.redis_support import own_redis
from tests.conftest import need_server
from tests.procapp.jobs import QUEUE
from tests.procapp.models import SideEffect
from tests.servers import MotoServer

from .conftest import Processes, Report, wait_for
from .test_redis_faults import point_at
from .test_sqs_faults import _configure

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases="__all__")]

N_JOBS = 120
OUTAGES_AT = (16, 50)  # jobs done when the engine is paused
LEASE = 2.0
PAUSE = 5.0  # past the lease, and past SQS's visibility (the lease + 1 s)
POLL = 1.0
# Every slot busy with a handler shorter than the pause: runs finish while the engine is
# paused, the loop's next call hangs in it, and comes back with those same jobs leased again.
WORKER_ARGS = ("--concurrency", "8", "--lease", f"{LEASE:g}", "--poll", f"{POLL:g}")
SLEEP = 0.3


@dataclass
class Engine:
    """The backend under test, how to pause it, and where its effects are stored."""

    alias: str
    handler: str
    pids: Any  # () -> list[int]: the processes to pause
    effects_db: str
    env: dict[str, str]
    overrides: dict[str, Any]


@pytest.fixture(params=["sqs", "redis", "postgres"])
def engine(
    request: pytest.FixtureRequest, settings: SettingsWrapper, tmp_path: Path
) -> Iterator[Engine]:
    alias: str = request.param
    need_server(alias)
    overrides: dict[str, Any] = {"SWEEP_INTERVAL": 0.5}
    if alias == "sqs":
        moto = MotoServer(tmp_path / "moto")
        moto.start()
        try:
            overrides = {**_configure(settings, ENDPOINT_URL=moto.url), **overrides}
            yield Engine(alias, "procapp.effect", lambda: [moto.pid], "default", {}, overrides)
        finally:
            moto.stop(kill=True)
    elif alias == "redis":
        with own_redis() as server:
            point_at(settings, server)
            env = {"BLAMEQUEUE_TEST_REDIS_URL": server.url}
            yield Engine(
                alias, "procapp.redis_effect", lambda: [server.pid], "default", env, overrides
            )
    else:
        yield Engine(alias, "procapp.effect", worker_backends, alias, {}, overrides)


def worker_backends() -> list[int]:
    """The server processes of every other connection to the PostgreSQL test database: the
    worker's (its claimer, slots, listener, sweeper and registry)."""
    with connections["postgres"].cursor() as cur:
        cur.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        return [int(r[0]) for r in cur.fetchall()]


@contextlib.contextmanager
def paused(pids: list[int]) -> Iterator[None]:
    """SIGSTOP ``pids``; SIGCONT them however the block ends."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def counts(b: Backend) -> dict[str, int]:
    for s in b.resilience.call(b.stats):
        if s.queue == QUEUE:
            return {k: v for k, v in s.counts.items() if v}
    return {}


def test_a_worker_claims_again_after_its_engine_was_paused_past_the_lease(
    engine: Engine, processes: Processes, report: Report
) -> None:
    b = get_backend(engine.alias)
    ids = {
        j.job_id
        for j in queue.enqueue_many(
            QUEUE, [{"sleep": SLEEP}] * N_JOBS, name=engine.handler, backend=engine.alias
        )
    }
    worker = processes.worker(
        engine.alias, *WORKER_ARGS, overrides=engine.overrides, extra_env=engine.env
    )
    firsts = []
    for part in OUTAGES_AT:  # twice: the second outage meets what the first left held
        wait_for(lambda n=part: counts(b).get("done", 0) >= n, 60, f"{part} jobs drained")
        pids = engine.pids()
        assert pids, "nothing to pause"
        with paused(pids):
            time.sleep(PAUSE)  # the outage itself: every lease the worker holds runs out
        resumed = time.monotonic()
        before = counts(b).get("done", 0)
        firsts.append(wait_for(lambda n=before: counts(b).get("done", 0) > n, 30, "a job done"))
    drained = wait_for(lambda: counts(b) == {"done": N_JOBS}, 90, "the same worker's drain")
    effects = SideEffect.objects.using(engine.effects_db).filter(job_id__in=ids).count()
    [me] = [w for w in fleet.workers(b) if w.pid == worker.pid]
    report(
        f"outage[{engine.alias}]",
        jobs=N_JOBS,
        lease=f"{LEASE:g} s",
        paused=f"{PAUSE:g} s",
        outages=len(OUTAGES_AT),
        first_job_done_after=" and ".join(f"{t:.1f} s" for t in firsts),
        drained_after_the_last=f"{time.monotonic() - resumed:.1f} s",
        lost=N_JOBS - effects,
        leases_lost=processes.stderr_count("ack refused")
        + processes.stderr_count("lost the lease"),
        run_alone=processes.stderr_count("running it alone"),
        worker_state=me.state,
    )
    assert drained < 90 and effects == N_JOBS
    assert me.state == "running", me
    assert worker.alive(), worker.tail()
    assert worker.stop() == 0
