"""How the redis backend connects — a URL, a django-redis alias, an ACL user, the environment
boot, TLS — and what its deployment checks say about a server that may evict jobs, keeps no
append-only file, is full, or cannot be reached."""

from __future__ import annotations

import subprocess
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.redis import RedisBackend
from django_blamequeue.backends.redis.keys import tagged
from django_blamequeue.exceptions import ErrorCode, QueueError

from .redis_support import (  # noqa: F401  (make_fixture: the make fixture)
    Make,
    done,
    invariant_problems,
    make_fixture,
    own_redis,
    shared_url,
    unique_prefix,
)

pytestmark = pytest.mark.django_db(transaction=True)


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
    assert "redis" in settings.CACHES  # tests/settings.py defines it with the Redis URL
    b = make("viacache", CONNECTION="redis")
    assert b.client is get_redis_connection("redis")
    queue.enqueue("cache", {"a": 1}, backend="viacache")
    assert b.client.exists(b.keys.queue("cache", "ready"))  # our key names, as they are
    b.close()  # the cache's pool is django-redis's: closing the backend leaves it working
    assert get_redis_connection("redis").ping()


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
        # Claims and acks still go through (each script's first write removes something):
        # workers are what empties a full Redis.
        claimed = b.claim(["full"], 2, 30)
        assert len(claimed) == 2
        assert [r.ok for r in b.apply_and_claim([done(claimed[0])], ["full"], 1, 30)[0]] == [True]
        assert b.apply_many([done(claimed[1])])[0].ok
        b.client.config_set("maxmemory", 0)


def test_an_unreachable_engine_is_a_deploy_warning_not_a_crash(make: Make) -> None:
    from tests.servers import find_free_port

    make("gone", URL=f"redis://127.0.0.1:{find_free_port()}/0")
    out = StringIO()
    call_command("check", "--deploy", stdout=out, stderr=out)
    assert "blamequeue.W006" in out.getvalue() and "'gone' could not be checked" in out.getvalue()
