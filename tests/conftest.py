"""Shared fixtures: a clean environment, backends per database, consumers stopped per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings

for _name in list(os.environ):
    if _name.startswith("BLAMEQUEUE_") and not _name.startswith("BLAMEQUEUE_TEST_"):
        del os.environ[_name]

LOCAL_BACKENDS = ["default", "postgres"]  # default = SQLite
ALL_BACKENDS = [*LOCAL_BACKENDS, "redis", "sqs"]
#: Backend alias → the server it needs: (test id, env var of its URL, env var that requires it).
SERVERS = {
    "postgres": ("postgres", "BLAMEQUEUE_TEST_POSTGRES_URL", "BLAMEQUEUE_TEST_REQUIRE_POSTGRES"),
    "redis": ("redis", "BLAMEQUEUE_TEST_REDIS_URL", "BLAMEQUEUE_TEST_REQUIRE_REDIS"),
    "sqs": ("sqs", "BLAMEQUEUE_TEST_SQS_URL", "BLAMEQUEUE_TEST_REQUIRE_SQS"),
}


def postgres_available() -> bool:
    return "postgres" in settings.DATABASES


def backend_available(alias: str) -> bool:
    return alias in settings.BLAMEQUEUE["BACKENDS"]


def need_server(alias: str) -> None:
    """Skip a test whose server (``postgres``, ``redis``, ``sqs``) is not running, unless
    `make test` started it (``BLAMEQUEUE_TEST_REQUIRE_*``): then its absence is a failure."""
    if backend_available(alias):
        return
    name, url_var, require_var = SERVERS[alias]
    if os.environ.get(require_var) == "1":
        pytest.fail(f"{name} is required here ({require_var}=1) but {url_var} is not set")
    pytest.skip(f"no {url_var}")


def isolate(settings: Any, alias: str, tag: str) -> None:
    """Give backend ``alias`` a key / queue prefix of its own (Redis and SQS keep their data
    outside the test databases, so a test starts from an empty engine this way, not a flush)."""
    options = dict(settings.BLAMEQUEUE["BACKENDS"][alias])
    if "KEY_PREFIX" in options:
        options["KEY_PREFIX"] = f"{options['KEY_PREFIX']}{tag}"
    if "QUEUE_PREFIX" in options:
        options["QUEUE_PREFIX"] = f"{options['QUEUE_PREFIX']}{tag}-"
    settings.BLAMEQUEUE = {
        **settings.BLAMEQUEUE,
        "BACKENDS": {**settings.BLAMEQUEUE["BACKENDS"], alias: options},
    }


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A backend whose server is not running skips; where `make test` started it, its tests
    must run (a missing server is then a failure, not a silent skip)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        alias = callspec.params.get("backend") if callspec is not None else None
        if alias not in SERVERS or backend_available(alias):
            continue
        name, url_var, require_var = SERVERS[alias]
        if os.environ.get(require_var) == "1":
            item.add_marker(pytest.mark.xfail(reason=f"{name} required", strict=True))
        else:
            item.add_marker(pytest.mark.skip(reason=f"no {url_var}"))


@pytest.fixture(params=LOCAL_BACKENDS, ids=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """The backend alias under test; the conformance suite runs once per value."""
    alias: str = request.param
    need_server(alias)
    request.getfixturevalue("transactional_db")
    return alias


@pytest.fixture(autouse=True)
def _fresh_backends() -> Iterator[None]:
    from django_blamequeue import backends, conf
    from django_blamequeue.api import queue

    conf.reset()
    backends.reset()
    yield
    queue.shutdown(timeout=5)
    backends.reset()
    conf.reset()
