"""Two redis backends on one Redis Cluster, their keys on different primaries: what spans them
goes through the outbox as separate idempotent steps (no script touches two slots), and the
flow sweeper repairs what a crash between those steps leaves. Runs on the cluster ``make test``
starts (tests/servers.py ``RedisClusterServer``)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.redis import RedisBackend
from django_blamequeue.backends.redis.listen import RedisListener
from django_blamequeue.core import ids
from django_blamequeue.jobs import registry
from tests.conftest import need_server
from tests.flows import conftest as flow_fixtures
from tests.flows.steps import relay, repair, work

from .redis_support import forget, lose_outbox, new_job, unique_prefix

pytestmark = [
    pytest.mark.django_db(transaction=True, databases="__all__"),
    pytest.mark.usefixtures("quiet_relay"),
]


@pytest.fixture(name="quiet_relay")
def no_nudges(monkeypatch: pytest.MonkeyPatch) -> None:
    """No nudge thread: outbox entries stay until the test runs the relay itself."""
    from django_blamequeue.relay import outbox

    monkeypatch.setattr(outbox, "nudge", lambda **_: None)


@pytest.fixture(name="jobs")
def flow_jobs() -> Iterator[SimpleNamespace]:
    for calls in flow_fixtures.CALLS.values():
        calls.clear()
    yield flow_fixtures._register()
    for name in list(registry.registered()):
        if name.startswith("tests.flows."):
            registry.unregister(name)


@pytest.fixture
def shards(settings: SettingsWrapper) -> Iterator[tuple[RedisBackend, RedisBackend]]:
    """Backends "north" and "south" on the test cluster, with key prefixes whose hash tags
    are served by two different primaries."""
    need_server("redis-cluster")
    url = os.environ["BLAMEQUEUE_TEST_REDIS_CLUSTER_URL"]
    entries: dict[str, dict[str, object]] = {}
    owners: list[str] = []
    for alias in ("north", "south"):
        while True:
            prefix = unique_prefix(alias)
            entry = {"PROTOCOL": "redis", "URL": url, "CLUSTER": True, "KEY_PREFIX": prefix}
            settings.BLAMEQUEUE = {
                **settings.BLAMEQUEUE,
                "BACKENDS": {**settings.BLAMEQUEUE["BACKENDS"], **entries, alias: entry},
            }
            b = get_backend(alias)
            assert isinstance(b, RedisBackend)
            owner = b.client.get_node_from_key(b.keys.prefix).name
            if owner not in owners:
                owners.append(owner)
                entries[alias] = entry
                break
    north, south = get_backend("north"), get_backend("south")
    assert isinstance(north, RedisBackend) and isinstance(south, RedisBackend)
    yield north, south
    for b in (north, south):
        with contextlib.suppress(Exception):
            forget(b)


def slots_of(b: RedisBackend) -> set[int]:
    """The hash slots of every key the backend has written."""
    return {
        b.client.keyslot(key) for key in b.client.scan_iter(match=f"{b.keys.prefix}:*", count=500)
    }


def test_a_flow_across_two_backends_on_different_primaries_completes_through_the_outbox(
    shards: tuple[RedisBackend, RedisBackend], jobs: SimpleNamespace
) -> None:
    north, south = shards
    parent = jobs.Continue.enqueue(
        {"pages": 3, "broken": [2], "child_backend": "south"}, backend="north"
    ).job_id
    work("north", ["reports"])  # the fan-out writes the children into north's outbox
    assert relay().sent == 3  # step two, separately: enqueue_many on south
    children = {j.job_id for j in south.flow_jobs(parent)}
    assert children == {ids.child_id(parent, f"p{i}") for i in range(3)}

    work("south", ["pages"])  # each child's report goes into south's outbox, in its script
    assert relay().sent == 3  # delivered to the parent on north
    work("north", ["reports"])
    info = queue.get_job(parent, backend="north")
    assert info is not None and info.state == "done"
    assert info.result == {"pages": 2, "words": 10, "failed": ["p2"]}
    assert slots_of(north) == {north.client.keyslot(north.keys.prefix)}
    assert slots_of(south) == {south.client.keyslot(south.keys.prefix)}
    assert slots_of(north) != slots_of(south)


def test_outbox_entries_lost_between_the_two_slots_are_repaired_by_the_flow_sweeper(
    shards: tuple[RedisBackend, RedisBackend], jobs: SimpleNamespace
) -> None:
    north, south = shards
    parent = jobs.Continue.enqueue({"pages": 2, "child_backend": "south"}, backend="north").job_id
    work("north", ["reports"])
    # A failover lost north's last writes after the fan-out's ack was answered: the outbox
    # entries for south are gone. The sweeper re-lands the missing children (by child id, so a
    # second landing is answered as the first).
    assert lose_outbox(north) > 0
    assert relay().sent == 0
    assert repair(north)["relanded"] == 2
    assert relay().sent == 2
    assert repair(north)["relanded"] == 0  # landed now: nothing to mend
    assert len(south.flow_jobs(parent)) == 2
    work("south", ["pages"])
    relay()
    work("north", ["reports"])
    assert queue.get_job(parent, backend="north").state == "done"  # type: ignore[union-attr]


def test_the_deployment_check_reads_every_primary_of_the_cluster(
    shards: tuple[RedisBackend, RedisBackend],
) -> None:
    north, _ = shards
    primaries = north.client.get_primaries()
    assert len(primaries) == 3
    # the test cluster runs without an append-only file: every primary risks its jobs
    assert [m.id for m in north.check()] == ["blamequeue.W005"]


def test_an_enqueue_wakes_a_listener_subscribed_through_the_cluster(
    shards: tuple[RedisBackend, RedisBackend],
) -> None:
    north, _ = shards
    listener = RedisListener(north, ["wake"])
    woken = threading.Event()
    listener.start(woken)
    try:
        deadline = time.monotonic() + 5
        while not listener.listening:
            assert time.monotonic() < deadline, "the listener did not subscribe"
            time.sleep(0.01)
        woken.clear()
        other = RedisBackend(north.config)  # another process would be: no in-process wake-up
        other.enqueue_many([new_job("wake", {"a": 1})])  # published on the primary of its slot
        assert woken.wait(5)
        other.close()
    finally:
        listener.stop()


def test_the_worker_banner_names_the_slot_that_holds_the_backend(
    shards: tuple[RedisBackend, RedisBackend],
) -> None:
    north, _ = shards
    slot = north.client.keyslot(north.keys.prefix)
    assert north.engine_label == f"Redis Cluster, slot {slot}"
