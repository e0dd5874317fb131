"""Parent/child flows across Redis and the local backend, the Redis outbox and its relay, and
the flow repair on Redis: what the conformance suite's single direction does not reach.

Steps are explicit (``tests/flows/steps.py``): a test decides when children run and when the
relay delivers, with the nudge thread off (``quiet_relay``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.redis import RedisBackend
from django_blamequeue.core import ids
from django_blamequeue.core.records import Report
from django_blamequeue.jobs import registry
from django_blamequeue.relay import routing
from django_blamequeue.relay.outbox import Relay
from tests.flows import conftest as flow_fixtures
from tests.flows.steps import outcome_of, relay, repair, work

from .redis_support import forget, invariant_problems, lose_outbox, shared_url, unique_prefix

pytestmark = [
    pytest.mark.django_db(transaction=True, databases="__all__"),  # the relay visits each
    pytest.mark.usefixtures("quiet_relay"),
]


@pytest.fixture(name="quiet_relay")
def no_nudges(monkeypatch: pytest.MonkeyPatch) -> None:
    """No nudge thread: outbox entries stay until the test runs the relay itself."""
    from django_blamequeue.relay import outbox

    monkeypatch.setattr(outbox, "nudge", lambda **_: None)


@pytest.fixture(name="jobs")
def flow_jobs() -> Iterator[SimpleNamespace]:
    """The flow tests' jobs and flows (tests/flows/conftest.py)."""
    for calls in flow_fixtures.CALLS.values():
        calls.clear()
    yield flow_fixtures._register()
    for name in list(registry.registered()):
        if name.startswith("tests.flows."):
            registry.unregister(name)


@pytest.fixture
def redis(settings: SettingsWrapper) -> Iterator[RedisBackend]:
    """The "redis" backend on a key prefix of this test's own."""
    entry = {"PROTOCOL": "redis", "URL": shared_url(), "KEY_PREFIX": unique_prefix("flow")}
    settings.BLAMEQUEUE = {
        **settings.BLAMEQUEUE,
        "BACKENDS": {**settings.BLAMEQUEUE["BACKENDS"], "redis": entry},
    }
    backend = get_backend("redis")
    assert isinstance(backend, RedisBackend)
    yield backend
    with contextlib.suppress(Exception):
        forget(backend)


def kids(parent: str, n: int) -> list[str]:
    return [ids.child_id(parent, f"p{i}") for i in range(n)]


def outbox_entries(b: RedisBackend) -> list[dict[str, Any]]:
    eids = b.client.zrange(b.keys.outbox, 0, -1)
    return [
        {k.decode(): v for k, v in b.client.hgetall(f"{b.keys.prefix}:ob:{e.decode()}").items()}
        for e in eids
    ]


def test_a_local_parent_collects_the_reports_of_its_children_on_redis(
    redis: RedisBackend, jobs: SimpleNamespace
) -> None:
    parent = jobs.Continue.enqueue({"pages": 3, "broken": [2], "child_backend": "redis"}).job_id
    work("default", ["reports"])  # fan-out on SQLite: the children go out through its outbox
    assert relay("default").sent == 3
    children = {j.job_id: j for j in redis.flow_jobs(parent)}
    assert set(children) == set(kids(parent, 3))
    assert {(j.state, j.parent_id) for j in children.values()} == {("pending", parent)}

    work("redis", ["pages"])  # terminal children report into the Redis outbox, in-script
    assert redis.unsent_for(kids(parent, 3), "report") == set(kids(parent, 3))
    assert queue.get_job(parent).children == {"pending": 3}  # type: ignore[union-attr]
    assert relay().sent == 3  # the Redis outbox → deliver_reports on the local backend
    assert queue.get_job(parent).children == {"done": 2, "failed": 1}  # type: ignore[union-attr]
    assert redis.unsent_for(kids(parent, 3), "report") == set()

    work("default", ["reports"])  # collect
    info = queue.get_job(parent)
    assert info is not None and info.state == "done"
    assert info.result == {"pages": 2, "words": 10, "failed": ["p2"]}


def test_a_fail_fast_settle_on_redis_cancels_the_children_left_elsewhere(
    redis: RedisBackend, jobs: SimpleNamespace
) -> None:
    parent = jobs.Report.enqueue(
        {"pages": 3, "broken": [0, 1, 2], "child_backend": "default"}, backend="redis"
    ).job_id
    work("redis", ["reports"])
    assert [e["kind"] for e in outbox_entries(redis)] == [b"enqueue"] * 3
    assert relay().sent == 3
    local = get_backend("default")
    claimed = local.claim(["pages"], 3, 60)
    first = claimed[0]
    local.apply_many([outcome_of("default", first)])  # one child fails; two still run
    assert relay().sent == 1  # its report reaches the parent: a fail-fast settle
    running = [c.job_id for c in claimed[1:]]
    for job_id in running:  # the settle's cascade asked the other backend to cancel them
        info = local.get(job_id)
        assert info is not None and info.state == "inflight" and info.cancel_requested
    assert redis.client.sismember(redis.keys.cascade, parent)
    assert repair(redis)["cascaded"] == 2  # still running there: asked again

    local.apply_many([outcome_of("default", c) for c in claimed[1:]])  # they end cancelled
    assert {local.get(j).state for j in running} == {"cancelled"}  # type: ignore[union-attr]
    assert repair(redis)["cascaded"] == 0
    assert not redis.client.sismember(redis.keys.cascade, parent)
    relay()
    assert queue.get_job(parent, backend="redis").children == {"failed": 1, "cancelled": 2}  # type: ignore[union-attr]


def test_repair_relands_children_whose_outbox_entries_were_lost(
    redis: RedisBackend, jobs: SimpleNamespace
) -> None:
    parent = jobs.Continue.enqueue({"pages": 2, "child_backend": "default"}, backend="redis").job_id
    work("redis", ["reports"])
    assert lose_outbox(redis) > 0
    assert relay().sent == 0
    assert repair(redis)["relanded"] == 2
    assert relay().sent == 2
    assert {get_backend("default").get(j).state for j in kids(parent, 2)} == {"pending"}  # type: ignore[union-attr]
    assert repair(redis)["relanded"] == 0  # landed now: nothing to mend

    work("default", ["pages"])
    relay()
    work("redis", ["reports"])
    assert queue.get_job(parent, backend="redis").state == "done"  # type: ignore[union-attr]


def test_a_report_lost_from_the_redis_outbox_is_synthesized_by_the_parents_repair(
    redis: RedisBackend, jobs: SimpleNamespace
) -> None:
    parent = jobs.Continue.enqueue({"pages": 2, "child_backend": "redis"}).job_id
    work("default", ["reports"])
    relay("default")
    work("redis", ["pages"])
    assert lose_outbox(redis) > 0  # both children's reports, gone
    assert relay().sent == 0
    assert queue.get_job(parent).children == {"pending": 2}  # type: ignore[union-attr]

    repaired = repair(get_backend("default"))  # asks Redis: terminal, no report unsent
    assert repaired["synthesized"] == 2
    assert relay().sent == 2
    assert queue.get_job(parent).children == {"done": 2}  # type: ignore[union-attr]


def test_one_broken_parent_never_keeps_the_repair_from_the_others(
    redis: RedisBackend, jobs: SimpleNamespace
) -> None:
    broken = jobs.Continue.enqueue({"pages": 1, "child_backend": "default"}, backend="redis")
    healthy = jobs.Continue.enqueue({"pages": 1, "child_backend": "default"}, backend="redis")
    work("redis", ["reports"])
    lose_outbox(redis)
    child = ids.child_id(broken.job_id, "p0")
    redis.client.hset(redis.keys.manifest(broken.job_id), f"j:{child}", "{not json")
    repaired = repair(redis)
    assert (repaired["skipped"], repaired["relanded"]) == (1, 1)
    assert relay().sent == 1
    assert get_backend("default").get(ids.child_id(healthy.job_id, "p0")) is not None


def test_an_entry_the_relay_cannot_deliver_is_counted_kept_and_never_blocks_the_rest(
    redis: RedisBackend, jobs: SimpleNamespace
) -> None:
    parent = jobs.Continue.enqueue({"pages": 2, "child_backend": "default"}, backend="redis").job_id
    work("redis", ["reports"])
    # A report bound for a backend that is not configured (a renamed alias, say).
    redis.client.hset(f"{redis.keys.prefix}:ob:999", mapping={"kind": "report", "job_id": "x"})
    redis.client.hset(f"{redis.keys.prefix}:ob:999", "backend", "nowhere")
    redis.client.zadd(redis.keys.outbox, {"999": 999})
    sent, skipped = Relay().drain_engine(redis)
    assert (sent, skipped) == (2, 1)
    (left,) = outbox_entries(redis)
    assert left["backend"] == b"nowhere" and left["attempts"] == b"1"
    assert b"nowhere" in left["last_error"]
    assert {get_backend("default").get(j).state for j in kids(parent, 2)} == {"pending"}  # type: ignore[union-attr]
    assert Relay().drain_engine(redis) == (0, 1)  # retried on the next pass, still failing, kept
    for n in range(3):  # a whole page of failing entries: the pass still ends
        redis.client.hset(f"{redis.keys.prefix}:ob:{1000 + n}", mapping=dict(left))
        redis.client.zadd(redis.keys.outbox, {str(1000 + n): 1000 + n})
    assert Relay(batch=2).drain_engine(redis) == (0, 4)


def test_a_relay_that_dies_mid_send_repeats_harmlessly_after_its_lease(
    redis: RedisBackend, jobs: SimpleNamespace
) -> None:
    parent = jobs.Continue.enqueue({"pages": 2, "child_backend": "redis"}).job_id
    work("default", ["reports"])
    relay("default")
    work("redis", ["pages"])
    taken = redis.take_outbox(100)  # a relay takes them …
    assert len(taken) == 2
    for item in taken:  # … delivers them …
        assert item.report is not None
        routing.deliver_reports(item.backend, [item.report])
    # … and dies before deleting them: leased, another relay leaves them alone until expiry.
    assert Relay().drain_engine(redis) == (0, 0)
    redis.client.zadd(redis.keys.outbox_leased, {e.ref: 0 for e in taken})  # the lease runs out
    assert Relay().drain_engine(redis) == (2, 0)  # sent again: recorded once
    assert queue.get_job(parent).children == {"done": 2}  # type: ignore[union-attr]
    again = Report(parent_id=parent, child_id=kids(parent, 2)[0], state="failed", error="late")
    assert get_backend("default").deliver_reports([again]) == 0
    assert invariant_problems(redis) == []
