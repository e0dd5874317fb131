"""Helpers for the Redis-specific tests: throwaway servers, backends on their own key prefix,
and an invariant check that reads the raw keys (every job in exactly the index of its state)."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pytest_django import Settings as SettingsWrapper

from django_blamequeue.backends import get_backend
from django_blamequeue.backends.base import Backend
from django_blamequeue.backends.redis import RedisBackend
from django_blamequeue.core import ids, lifecycle
from django_blamequeue.core.records import Ack, NewJob
from django_blamequeue.serializers import encode
from tests.conftest import need_server

_serial = itertools.count()
Make = Callable[..., RedisBackend]

#: Index → the state its members must be in.
_SETS = {"blocked": "blocked", "waiting": "waiting_children"}
_ZSETS = {
    "delayed": "pending",
    "done": "done",
    "failed": "failed",
    "cancelled": "cancelled",
    "dlq": "failed",
}


def shared_url() -> str:
    need_server("redis")
    return os.environ["BLAMEQUEUE_TEST_REDIS_URL"]


def unique_prefix(tag: str = "t") -> str:
    return f"bq-{os.getpid()}-{tag}{next(_serial)}"


@contextmanager
def own_redis(appendonly: str = "no", extra_config: Sequence[str] = ()) -> Iterator[Any]:
    """A redis-server of the test's own (so it may be reconfigured, killed or restarted)."""
    from tests.servers import RedisServer
    from tests.settings import TMP

    base = Path(tempfile.mkdtemp(prefix="redis-", dir=TMP))
    need_server("redis")  # where one Redis runs, redis-server is installed
    server = RedisServer(base, appendonly=appendonly, extra_config=extra_config)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop(kill=True)
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def own_cluster(appendonly: str = "no") -> Iterator[Any]:
    """A Redis Cluster of the test's own, 3 primaries + 3 replicas (so a primary may be failed
    over or killed)."""
    from tests.servers import RedisClusterServer
    from tests.settings import TMP

    need_server("redis-cluster")  # where the shared cluster runs, its programs are installed
    base = Path(tempfile.mkdtemp(prefix="cluster-", dir=TMP))
    server = RedisClusterServer(base, appendonly=appendonly)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop(kill=True)
        shutil.rmtree(base, ignore_errors=True)


def lose_outbox(b: RedisBackend) -> int:
    """The Redis outbox vanishes (as if never written): entries, index and per-job counts."""
    keys = [f"{b.keys.prefix}:ob:{e.decode()}" for e in b.client.zrange(b.keys.outbox, 0, -1)]
    keys += [b.keys.outbox, b.keys.unsent("enqueue"), b.keys.unsent("report")]
    return int(b.client.delete(*keys))


def forget(backend: Backend) -> None:
    """Delete every key of the backend's prefix (tests on the shared server clean up)."""
    client = backend.client  # type: ignore[attr-defined]
    pattern = backend.keys.prefix + ":*"  # type: ignore[attr-defined]
    batch: list[bytes] = []
    for key in client.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            client.delete(*batch)
            batch.clear()
    if batch:
        client.delete(*batch)


def invariant_problems(backend: Backend) -> list[str]:
    """What breaks "every job sits in exactly the index of its state, and every index entry is
    a job in that state" (empty when the keys are consistent)."""
    r = backend.client  # type: ignore[attr-defined]
    p = backend.keys.prefix  # type: ignore[attr-defined]
    jobs: dict[str, dict[bytes, bytes]] = {}
    for key in r.scan_iter(match=f"{p}:job:*", count=1000):
        h = r.hmget(key, "state", "queue", "avail")
        jobs[key.decode().rsplit(":", 1)[1]] = {b"state": h[0], b"queue": h[1], b"avail": h[2]}
    problems: list[str] = []
    queues = {q.decode() for q in r.smembers(f"{p}:queues")}
    seen: dict[str, list[str]] = {}
    for q in queues:
        for part, state in _SETS.items():
            for raw in r.smembers(f"{p}:q:{q}:{part}"):
                seen.setdefault(raw.decode(), []).append(part)
                _expect(problems, jobs, raw.decode(), state, f"{q}:{part}")
        for part, state in _ZSETS.items():
            for raw in r.zrange(f"{p}:q:{q}:{part}", 0, -1):
                if part != "dlq":
                    seen.setdefault(raw.decode(), []).append(part)
                _expect(problems, jobs, raw.decode(), state, f"{q}:{part}")
        for raw in r.zrange(f"{p}:q:{q}:ready", 0, -1):
            job_id = raw.decode()[16:]
            seen.setdefault(job_id, []).append("ready")
            _expect(problems, jobs, job_id, "pending", f"{q}:ready")
            avail = jobs[job_id][b"avail"] if job_id in jobs else None
            if avail is not None and int(raw[:16]) != int(avail):
                problems.append(f"{job_id}: ready member {raw!r} is not its available_at")
    for raw in r.zrange(f"{p}:inflight", 0, -1):
        seen.setdefault(raw.decode(), []).append("inflight")
        _expect(problems, jobs, raw.decode(), "inflight", "inflight (global)")
    for q in queues:  # the per-queue counters of leased jobs
        counted = int(r.hget(f"{p}:leased", q) or 0)
        held = sum(
            1 for h in jobs.values() if h[b"state"] == b"inflight" and h[b"queue"] == q.encode()
        )
        if counted != held:
            problems.append(f"queue {q}: {counted} leased counted, {held} jobs inflight")
    for job_id, h in jobs.items():
        where = seen.get(job_id, [])
        if len(where) != 1:
            problems.append(f"{job_id} ({h[b'state']!r}) is in {len(where)} indexes: {where}")
    return problems


def _expect(
    problems: list[str], jobs: dict[str, dict[bytes, bytes]], job_id: str, state: str, index: str
) -> None:
    h = jobs.get(job_id)
    if h is None:
        problems.append(f"{index} lists {job_id}, which does not exist")
    elif h[b"state"] != state.encode():
        problems.append(f"{index} lists {job_id}, which is {h[b'state']!r}")


@pytest.fixture(name="make")
def make_fixture(settings: SettingsWrapper) -> Iterator[Make]:
    """``make(alias, **options)``: a redis backend entry (default: the shared test server, a
    fresh key prefix) added to the settings; its keys are deleted after the test."""
    made: list[RedisBackend] = []
    entries: dict[str, dict[str, Any]] = {}

    def build(alias: str = "rq", **options: Any) -> RedisBackend:
        entry = {"PROTOCOL": "redis", "KEY_PREFIX": unique_prefix(alias), **options}
        if "CONNECTION" not in entry and "URL" not in entry:
            entry["URL"] = shared_url()
        entries[alias] = entry
        settings.BLAMEQUEUE = {
            **settings.BLAMEQUEUE,
            "BACKENDS": {**settings.BLAMEQUEUE["BACKENDS"], **entries},
        }
        backend = get_backend(alias)
        assert isinstance(backend, RedisBackend)
        made.append(backend)
        return backend

    yield build
    for backend in made:
        with contextlib.suppress(Exception):  # its server may be gone already (a test's own)
            forget(backend)


def new_job(queue_name: str, payload: Any = None, **fields: Any) -> NewJob:
    return NewJob(
        job_id=fields.pop("job_id", None) or ids.new_id(),
        queue=queue_name,
        name=queue_name,
        payload=encode(payload),
        **fields,
    )


def done(c: Any) -> Ack:
    t = lifecycle.decide(
        lifecycle.Succeeded(None), attempt=c.attempt, max_attempts=3, policy=lifecycle.Policy()
    )
    return Ack(job_id=c.job_id, token=c.token, transition=t)
