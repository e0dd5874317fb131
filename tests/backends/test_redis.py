"""What is specific to the redis backend: its key layout and hash slot, the atomicity of its
Lua scripts, idempotent enqueue by id, DAG pages, binary payloads, the exact claim order its
members encode, large batches and pub/sub wake-ups (connecting and deployment checks:
test_redis_connect.py).

The lifecycle itself is proven by the conformance suite (tests/conformance, ``-k redis``).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from redis.crc import key_slot

from django_blamequeue import queue
from django_blamequeue.backends.redis import RedisBackend
from django_blamequeue.backends.redis.codec import job_header
from django_blamequeue.backends.redis.keys import tagged
from django_blamequeue.backends.redis.listen import RedisListener
from django_blamequeue.core import ids, lifecycle
from django_blamequeue.core.records import Ack, NewJob
from django_blamequeue.core.timeseries import RESOLUTIONS, Sample, floor

from .redis_support import (  # noqa: F401  (make_fixture: the make fixture)
    Make,
    done,
    forget,
    invariant_problems,
    make_fixture,
    new_job,
    own_redis,
)

pytestmark = pytest.mark.django_db(transaction=True)


# -- keys -------------------------------------------------------------------------------------
def test_every_key_of_a_backend_starts_with_its_prefix_and_shares_one_hash_slot(make: Make) -> None:
    a = make("ra")
    b = make("rb")
    flow = queue.enqueue_flow(
        "keys", [{"name": "x"}, {"name": "y", "depends_on": ["x"]}], backend="ra"
    )
    queue.enqueue("keys", {"k": 1}, dedupe_key="one", backend="ra")
    queue.enqueue("keys", {"k": 2}, delay=60, backend="ra")
    failing = queue.enqueue("keys", {"k": 3}, max_attempts=1, priority=9, backend="ra").job_id
    (c,) = a.claim(["keys"], 1, 30)
    assert c.job_id == failing
    t = lifecycle.decide(
        lifecycle.Raised(RuntimeError("no")), attempt=1, max_attempts=1, policy=lifecycle.Policy()
    )
    a.apply_many([Ack(job_id=c.job_id, token=c.token, transition=t)])
    a.claim(["keys"], 1, 30)

    keys = [k.decode() for k in a.client.scan_iter(match=a.keys.prefix + ":*")]
    assert len(keys) > 10
    assert all(k.startswith(tagged(a.config.options["KEY_PREFIX"]) + ":") for k in keys)
    assert {key_slot(k.encode()) for k in keys} == {key_slot(a.keys.prefix.encode())}

    # Another prefix on the same server sees nothing of it.
    assert b.size("keys") == 0 and b.dlq_size("keys") == 0 and b.stats() == []
    assert b.get(flow["jobs"][0]["job_id"]) is None and b.claim(["keys"], 10, 30) == []
    assert a.size("keys") == 3  # x, the keyed job, the delayed job (y is blocked)
    assert invariant_problems(a) == []


def test_a_chart_bucket_shares_the_slot_and_expires_once_its_window_has_passed(
    make: Make,
) -> None:
    a = make("ra")
    t = a.now()
    a.record_samples([Sample(queue="q", name="n", done=1)], now=t)
    for r in RESOLUTIONS:
        start = int(floor(t, r.step).timestamp())
        key = a.keys.bucket(r.step, start)
        assert key_slot(key.encode()) == key_slot(a.keys.prefix.encode())
        assert a.client.expiretime(key) == start + r.step + r.keep


def test_a_prefix_with_its_own_hash_tag_is_used_as_it_is() -> None:
    assert tagged("jobs") == "{jobs}"
    assert tagged("app:{jobs}") == "app:{jobs}"
    assert tagged("{a}b") == "{a}b"


# -- atomicity --------------------------------------------------------------------------------
def test_a_script_that_has_written_cannot_be_killed_half_way(make: Make) -> None:
    """SCRIPT KILL only stops a script that has not written yet; once one of ours wrote, Redis
    refuses (UNKILLABLE) and the script completes: it applies entirely or not at all."""
    with own_redis() as server:
        b = make("big", URL=server.url)
        admin = b.client
        admin.config_set("busy-reply-threshold", 5)  # ms: BUSY (and SCRIPT KILL) at once
        n = 20_000
        jobs = [new_job("atomic", {"i": i}) for i in range(n)]
        headers, payloads = [job_header(j) for j in jobs], [j.payload.body for j in jobs]
        answers: list[str] = []
        runner = threading.Thread(target=lambda: b.scripts.run("enqueue", headers, payloads))
        runner.start()
        killer = type(admin).from_url(server.url)
        deadline = time.monotonic() + 30
        while runner.is_alive() and time.monotonic() < deadline:
            try:
                killer.script_kill()
                answers.append("killed")
            except Exception as exc:
                answers.append(str(exc).split()[0])
            time.sleep(0.002)
        runner.join(30)
        killer.close()
        assert "UNKILLABLE" in answers, answers[:5]
        assert "killed" not in answers
        assert b.size("atomic") == n
        assert invariant_problems(b) == []


def test_scripts_are_reloaded_after_script_flush_alone_and_in_a_pipeline(make: Make) -> None:
    b = make()
    queue.enqueue("flush", {"a": 1}, backend="rq")
    b.client.script_flush()
    queue.enqueue("flush", {"a": 2}, backend="rq")  # EVALSHA → NOSCRIPT → load, again
    b.client.script_flush()
    many = [new_job("flush", {"i": i}) for i in range(2500)]  # 3 script calls in MULTI/EXEC
    assert len(b.enqueue_many(many)) == 2500
    assert b.size("flush") == 2502


# -- idempotent enqueue -------------------------------------------------------------------------
def test_enqueue_is_idempotent_by_id_answered_not_reinserted_nor_rededuped(make: Make) -> None:
    b = make()
    first = new_job("idem", {"v": 1}, dedupe_key="k")
    other = new_job("idem", {"v": 2})
    assert [e.deduplicated for e in b.enqueue_many([first, other])] == [False, False]
    (c,) = b.claim(["idem"], 1, 30)
    b.apply_many([done(c)])  # the key is free again once its holder is done

    again = b.enqueue_many([first, other])  # the relay sending the same jobs twice
    assert [(e.job_id, e.deduplicated) for e in again] == [
        (first.job_id, False),
        (other.job_id, False),
    ]
    assert b.get(first.job_id).state == "done"  # type: ignore[union-attr]
    assert b.get(other.job_id).payload == {"v": 2}  # type: ignore[union-attr]
    assert sum(sum(s.counts.values()) for s in b.stats()) == 2
    third = b.enqueue_many([new_job("idem", dedupe_key="k")])[0]
    assert not third.deduplicated  # the key was freed by the done ack, not re-held by a resend


# -- DAG pages and binary payloads ----------------------------------------------------------------
def test_dependants_count_only_unfinished_dependencies_whatever_the_arrival_order(
    make: Make,
) -> None:
    """The relay may deliver a big flow in pages: a dependency already done does not block,
    one not inserted yet does."""
    b = make()
    flow = ids.new_id()
    dep = new_job("dag", "dep", flow_id=flow, flow_key="dep")
    b.enqueue_many([dep])
    (c,) = b.claim(["dag"], 1, 30)
    b.apply_many([done(c)])
    late = new_job("dag", "late", flow_id=flow, blocked=True, depends_on=(dep.job_id,))
    early_dep = new_job("dag", "early-dep", flow_id=flow)
    early = new_job(
        "dag", "early", flow_id=flow, blocked=True, depends_on=(dep.job_id, early_dep.job_id)
    )
    b.enqueue_many([late, early])  # early's second dependency is in the next page
    assert b.get(late.job_id).state == "pending"  # type: ignore[union-attr]
    assert b.get(early.job_id).state == "blocked"  # type: ignore[union-attr]
    b.enqueue_many([early_dep])
    got = {c.job_id: c for c in b.claim(["dag"], 10, 30)}
    assert set(got) == {late.job_id, early_dep.job_id}
    b.apply_many([done(got[early_dep.job_id])])
    assert b.get(early.job_id).state == "pending"  # type: ignore[union-attr]
    assert invariant_problems(b) == []


def test_payloads_and_results_are_stored_as_the_bytes_they_are(make: Make) -> None:
    from django_blamequeue.core.payload import Encoded

    b = make()
    raw = bytes(range(256)) * 4 + b"\x00\xff{}"
    job = NewJob(
        job_id=ids.new_id(),
        queue="bin",
        name="bin",
        payload=Encoded("application/octet-stream", "binary", raw),
    )
    b.enqueue_many([job])
    (c,) = b.claim(["bin"], 1, 30)
    assert c.payload == Encoded("application/octet-stream", "binary", raw)
    t = lifecycle.decide(
        lifecycle.Succeeded(Encoded("application/octet-stream", "binary", raw[::-1])),
        attempt=1,
        max_attempts=3,
        policy=lifecycle.Policy(),
    )
    assert b.apply_many([Ack(job_id=c.job_id, token=c.token, transition=t)])[0].ok
    stored = b.client.hmget(b.keys.job(c.job_id), "payload", "result")
    assert stored == [raw, raw[::-1]]


# -- claim order --------------------------------------------------------------------------------
def test_ties_order_by_available_at_to_the_microsecond_then_by_id(make: Make) -> None:
    b = make()
    t = b.now() - timedelta(minutes=5)
    later, earlier = t + timedelta(microseconds=1), t
    jobs = [
        new_job("order", "a", run_at=later),  # first id, later by a microsecond
        new_job("order", "b", run_at=earlier),
        new_job("order", "c", run_at=earlier),  # same time as b: after b by id
        new_job("order", "d", run_at=later, priority=-1),
        new_job("order", "e", run_at=later + timedelta(days=1), priority=7),  # not due
        new_job("order", "f", run_at=datetime(1990, 1, 1, tzinfo=UTC), priority=-1),
    ]
    b.enqueue_many(jobs)
    order = [c.payload.body for c in b.claim(["order"], 10, 30)]
    assert order == [b'"b"', b'"c"', b'"a"', b'"f"', b'"d"']


def test_a_claim_over_several_queues_merges_them_in_one_order(make: Make) -> None:
    b = make()
    t = b.now() - timedelta(seconds=10)
    b.enqueue_many(
        [
            new_job("m1", "1-low", run_at=t),
            new_job("m2", "2-high", run_at=t + timedelta(seconds=1), priority=3),
            new_job("m2", "2-early", run_at=t - timedelta(seconds=1)),
            new_job("m1", "1-high", run_at=t + timedelta(seconds=2), priority=3),
        ]
    )
    got = [c.payload.body.decode() for c in b.claim(["m1", "m2"], 3, 30)]
    assert got == ['"2-high"', '"1-high"', '"2-early"']
    assert [c.payload.body.decode() for c in b.claim(["m1", "m2"], 3, 30)] == ['"1-low"']


# -- large batches ------------------------------------------------------------------------------
def test_large_batches_go_in_bounded_script_calls_and_keep_fifo(make: Make) -> None:
    b = make()
    n = 25_000
    started = time.monotonic()
    jobs = [new_job("bulk", {"i": i}) for i in range(n)]
    answers = b.enqueue_many(jobs)
    took = time.monotonic() - started
    assert [a.job_id for a in answers] == [j.job_id for j in jobs]
    assert b.size("bulk") == n
    claimed = b.claim(["bulk"], 1200, 60)
    assert [c.job_id for c in claimed] == [j.job_id for j in jobs[:1200]]
    assert b.renew_leases([(c.job_id, c.token) for c in claimed], 120) == frozenset()
    results = b.apply_many([done(c) for c in claimed])  # 3 ack scripts of ≤ 500
    assert all(r.ok for r in results) and len(results) == 1200
    assert b.size("bulk") == n - 1200
    assert invariant_problems(b) == []
    print(f"\n[redis] enqueue_many of {n:,}: {took:.2f} s ({n / took:,.0f} jobs/s)")


# -- wake-ups -----------------------------------------------------------------------------------
def test_an_enqueue_wakes_a_subscribed_listener_through_pubsub(make: Make) -> None:
    b = make()
    listener = RedisListener(b, ["wake"])
    woken = threading.Event()
    listener.start(woken)
    try:
        deadline = time.monotonic() + 5
        while not listener.listening:
            assert time.monotonic() < deadline, "the listener did not subscribe"
            time.sleep(0.01)
        woken.clear()
        other = RedisBackend(b.config)  # another process would be: no in-process wake-up
        other.enqueue_many([new_job("wake", {"a": 1})])
        assert woken.wait(5)
        woken.clear()
        other.enqueue_many([new_job("elsewhere", {"a": 1})])
        assert not woken.wait(0.3)  # only the queues it listens to
        other.close()
    finally:
        listener.stop()
