"""Reaching Redis: the client from ``CONNECTION`` or ``URL``, the errors that mean "unavailable",
and the deployment warnings (eviction, persistence).

With ``CONNECTION`` the client is django-redis's for that cache alias (its pool, its
Sentinel setup, its timeouts). With ``URL`` this backend object owns one redis-py pool
built from the URL plus ``USERNAME``/``PASSWORD`` (an ACL user) and ``TLS`` (``rediss://``);
its client never retries on its own: the resilience layer decides, and a command whose answer
was lost is not sent twice behind its back (a retried claim would lease jobs twice). With
``CLUSTER`` the URL names one node of a Redis Cluster and the client is redis-py's
``RedisCluster``: it follows ``MOVED``/``ASK`` redirections (the command did not run) and, after
a connection error, refreshes the slot map on the next call, but it does not resend the
failed command either.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.core import checks
from redis import exceptions as rx

logger = logging.getLogger("django_blamequeue.redis")

#: Mapped to BACKEND_UNAVAILABLE by the resilience layer (the breaker counts them).
UNAVAILABLE: tuple[type[BaseException], ...] = (
    rx.ConnectionError,  # includes BusyLoadingError, AuthenticationError, MaxConnectionsError
    rx.TimeoutError,
    rx.ReadOnlyError,  # a replica promoted away under us (failover in progress)
    rx.OutOfMemoryError,  # maxmemory reached under noeviction: no write gets in
    rx.ClusterDownError,
    rx.TryAgainError,
    OSError,
)


def connect(alias: str, options: Mapping[str, Any]) -> Any:
    """A redis-py client for the backend's options (bytes in, bytes out)."""
    if options.get("CONNECTION"):
        from django_redis import get_redis_connection

        return get_redis_connection(options["CONNECTION"])
    from redis import Redis, RedisCluster
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    url = str(options["URL"])
    if options.get("TLS") and url.startswith("redis://"):
        url = "rediss://" + url[len("redis://") :]
    kwargs: dict[str, Any] = {
        "socket_connect_timeout": 5.0,
        "socket_timeout": 30.0,
        "socket_keepalive": True,
        "health_check_interval": 15,
        "retry": Retry(NoBackoff(), 0),
        "client_name": f"blamequeue-{alias}",
    }
    if options.get("USERNAME"):
        kwargs["username"] = options["USERNAME"]
    if options.get("PASSWORD"):
        kwargs["password"] = options["PASSWORD"]
    if options.get("CLUSTER"):
        del kwargs["health_check_interval"]  # per node connection, checked as it is taken
        return RedisCluster.from_url(url, **kwargs)
    return Redis.from_url(url, **kwargs)


def warnings(client: Any, alias: str) -> list[checks.CheckMessage]:
    """What the server's configuration risks: jobs evicted, or acknowledged writes lost."""
    found: list[checks.CheckMessage] = []
    memory, persistence = _worst_info(client)
    policy = _text(memory.get("maxmemory_policy", "noeviction"))
    if policy != "noeviction":
        found.append(
            checks.Warning(
                f"redis backend {alias!r}: maxmemory-policy is {policy!r}; under memory "
                "pressure Redis evicts keys, and with them jobs, silently",
                hint="Set maxmemory-policy noeviction (writes then fail loudly when full), "
                "or give the queue a Redis of its own.",
                id="blamequeue.W004",
            )
        )
    if not int(persistence.get("aof_enabled", 0)):
        found.append(
            checks.Warning(
                f"redis backend {alias!r}: appendonly is no; a crash or restart loses every "
                "job written since the last RDB snapshot, acknowledged enqueues included",
                hint="Set appendonly yes with appendfsync everysec (at most about 1 s of writes "
                "lost on a crash) or always.",
                id="blamequeue.W005",
            )
        )
    return found


def _worst_info(client: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``INFO memory`` and ``INFO persistence``; on a cluster, of the first primary that risks
    something (every primary holds some queues' jobs), else of any primary."""
    from redis import RedisCluster

    if not isinstance(client, RedisCluster):
        return client.info("memory"), client.info("persistence")
    memories = client.info("memory", target_nodes=RedisCluster.PRIMARIES)
    persistences = client.info("persistence", target_nodes=RedisCluster.PRIMARIES)
    pairs = [(memories[name], persistences[name]) for name in sorted(memories)]
    for memory, persistence in pairs:
        policy = _text(memory.get("maxmemory_policy", "noeviction"))
        if policy != "noeviction" or not int(persistence.get("aof_enabled", 0)):
            return memory, persistence
    return pairs[0]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
