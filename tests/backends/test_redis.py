"""What is specific to the redis backend: its key layout and hash slot, the atomicity of its
Lua scripts, how it connects (URL, django-redis alias, ACL user, TLS), its deployment
warnings, the exact claim order its members encode, and large batches.

The lifecycle itself is proven by the conformance suite (tests/conformance, ``-k redis``).
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from pytest_django import Settings as SettingsWrapper
from redis.crc import key_slot

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.redis import RedisBackend
from django_blamequeue.backends.redis.codec import job_header
from django_blamequeue.backends.redis.keys import tagged
from django_blamequeue.backends.redis.listen import RedisListener
from django_blamequeue.core import ids, lifecycle
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.records import Ack, NewJob
from django_blamequeue.serializers import encode

from .redis_support import forget, invariant_problems, own_redis, shared_url, unique_prefix

pytestmark = pytest.mark.django_db(transaction=True)

Make = Callable[..., RedisBackend]


@pytest.fixture
def make(settings: SettingsWrapper) -> Iterator[Make]:
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
        runner = threading.Thread(target=lambda: b._run("enqueue", headers, payloads))
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


# -- connecting ------------------------------------------------------------------------------
def test_an_acl_user_confined_to_the_prefix_runs_the_whole_lifecycle(make: Make) -> None:
    prefix = unique_prefix("acl")
    tag = tagged(prefix)
    user = f"user alice on >s3cret ~{tag}* &{tag}* +@all -@dangerous +info"
    with own_redis(extra_config=[user]) as server:
        b = make("acl", URL=server.url, USERNAME="alice", PASSWORD="s3cret", KEY_PREFIX=prefix)
        assert b.client.acl_whoami() == "alice"
        job_id = queue.enqueue("acl", {"a": 1}, backend="acl").job_id
        (c,) = b.claim(["acl"], 5, 30)
        assert b.apply_many([done(c)])[0].ok
        assert queue.get_job(job_id, backend="acl").state == "done"  # type: ignore[union-attr]

        wrong = make("nope", URL=server.url, USERNAME="alice", PASSWORD="wrong")
        with pytest.raises(QueueError) as refused:
            queue.size("acl", backend="nope")
        assert refused.value.code == ErrorCode.BACKEND_UNAVAILABLE
        assert wrong.client is not b.client


def test_the_environment_boot_reaches_redis_with_username_and_password(
    settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch
) -> None:
    with own_redis(extra_config=["user bob on >pw ~* &* +@all"]) as server:
        del settings.BLAMEQUEUE
        for name, value in {
            "BLAMEQUEUE_PROTOCOL": "redis",
            "BLAMEQUEUE_REDIS_URL": server.url,
            "BLAMEQUEUE_REDIS_USERNAME": "bob",
            "BLAMEQUEUE_REDIS_PASSWORD": "pw",
            "BLAMEQUEUE_REDIS_KEY_PREFIX": "envboot",
        }.items():
            monkeypatch.setenv(name, value)
        b = get_backend()
        assert isinstance(b, RedisBackend) and b.keys.prefix == "{envboot}"
        queue.enqueue("env", {"a": 1})
        assert b.client.acl_whoami() == "bob" and queue.size("env") == 1


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway CA and a server certificate for 127.0.0.1."""
    d = tmp_path_factory.mktemp("tls")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=blamequeue-test-ca")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=127.0.0.1")  # fmt: skip
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
    return d


def test_tls_turns_the_url_into_rediss_and_verifies_the_server(
    make: Make, certificates: Path
) -> None:
    from tests.servers import find_free_port

    port = find_free_port()
    tls = [
        f"tls-port {port}",
        f"tls-cert-file {certificates / 'server.crt'}",
        f"tls-key-file {certificates / 'server.key'}",
        f"tls-ca-cert-file {certificates / 'ca.crt'}",
        "tls-auth-clients no",
    ]
    with own_redis(extra_config=tls):
        url = f"redis://127.0.0.1:{port}/0?ssl_ca_certs={certificates / 'ca.crt'}"
        b = make("tls", URL=url, TLS=True)
        queue.enqueue("tls", {"secret": 1}, backend="tls")
        assert queue.size("tls", backend="tls") == 1
        assert b.client.client_info()["laddr"].endswith(f":{port}")  # the TLS port

        make("plain", URL=f"redis://127.0.0.1:{port}/0")  # plain RESP on the TLS port
        with pytest.raises(QueueError) as refused:
            queue.size("tls", backend="plain")
        assert refused.value.code == ErrorCode.BACKEND_UNAVAILABLE


def test_a_connection_alias_uses_django_redis_pool_and_not_its_cache_prefix(
    make: Make, settings: SettingsWrapper
) -> None:
    from django_redis import get_redis_connection

    shared_url()
    if "redis" not in settings.CACHES:
        pytest.skip("no django-redis cache configured")
    b = make("viacache", CONNECTION="redis")
    assert b.client is get_redis_connection("redis")
    queue.enqueue("cache", {"a": 1}, backend="viacache")
    assert b.client.exists(b.keys.queue("cache", "ready"))  # our key names, as they are
    b.close()  # the cache's pool is django-redis's: closing the backend leaves it working
    assert get_redis_connection("redis").ping()


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


# -- deployment warnings ------------------------------------------------------------------------
def test_eviction_and_no_append_only_file_are_warned_about(make: Make) -> None:
    with own_redis(appendonly="no") as risky, own_redis(appendonly="everysec") as safe:
        risky_backend = make("risky", URL=risky.url)
        make("safe", URL=safe.url)
        risky_backend.client.config_set("maxmemory-policy", "allkeys-lru")
        out = StringIO()
        call_command("check", "--deploy", stdout=out, stderr=out)
        text = out.getvalue()
        assert "blamequeue.W004" in text and "'allkeys-lru'" in text
        assert "blamequeue.W005" in text
        assert [m.id for m in risky_backend.check()] == ["blamequeue.W004", "blamequeue.W005"]
        assert list(get_backend("safe").check()) == []
        banner = risky_backend.deployment_warnings()
        assert len(banner) == 2 and "evicts keys" in banner[0]


def test_a_full_redis_refuses_writes_as_unavailable_and_keeps_nothing_half_written(
    make: Make,
) -> None:
    with own_redis() as server:
        b = make("full", URL=server.url)
        b.client.config_set("maxmemory-policy", "noeviction")
        queue.enqueue_many("full", [{"i": i} for i in range(100)], backend="full")
        used = int(b.client.info("memory")["used_memory"])
        b.client.config_set("maxmemory", used + 1024)
        with pytest.raises(QueueError) as full:
            queue.enqueue_many("full", ["x" * 4096] * 500, backend="full")
        assert full.value.code == ErrorCode.BACKEND_UNAVAILABLE and "maxmemory" in str(full.value)
        assert b.size("full") == 100 and invariant_problems(b) == []
        (c,) = b.claim(["full"], 1, 30)  # reads and small writes still go through
        b.client.config_set("maxmemory", 0)
        assert b.apply_many([done(c)])[0].ok


def test_an_unreachable_engine_is_a_deploy_warning_not_a_crash(make: Make) -> None:
    from tests.servers import find_free_port

    make("gone", URL=f"redis://127.0.0.1:{find_free_port()}/0")
    out = StringIO()
    call_command("check", "--deploy", stdout=out, stderr=out)
    assert "blamequeue.W006" in out.getvalue() and "'gone' could not be checked" in out.getvalue()


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
    from django_blamequeue.serializers import Encoded

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
