"""Shared fixtures: a clean environment, backends per database, consumers stopped per test.

The backends under test come from the table of backends (``conf/engines.py``): the local
protocol runs on each test database ("default" is SQLite, "postgres" exists when its server
runs), every other protocol as the backend of its own name, on the test server of that name
(``tests/servers.py``, whose URL ``tests/settings.py`` configures it with). ``pytest
--blamequeue-engine ALIAS=ENTRY`` adds an engine from elsewhere to the conformance suite
(docs/writing-a-backend.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings

from django_blamequeue.conf.engines import AVAILABLE

for _name in list(os.environ):
    if _name.startswith("BLAMEQUEUE_") and not _name.startswith("BLAMEQUEUE_TEST_"):
        del os.environ[_name]

LOCAL_BACKENDS = ["default", "postgres"]  # default = SQLite
REMOTE_BACKENDS = [name for name in AVAILABLE if name != "local"]
ALL_BACKENDS = [*LOCAL_BACKENDS, *REMOTE_BACKENDS]
#: The redis protocol again, on a Redis Cluster (3 primaries + 3 replicas: tests/servers.py
#: ``RedisClusterServer``): the conformance suite's fifth backend, not every test's.
CLUSTER_BACKENDS = ["redis-cluster"] if "redis" in AVAILABLE else []


def _variable(name: str) -> str:
    return name.upper().replace("-", "_")


#: Backend alias → the server it needs: (test id, env var of its URL, env var that requires it).
SERVERS = {
    name: (
        name,
        f"BLAMEQUEUE_TEST_{_variable(name)}_URL",
        f"BLAMEQUEUE_TEST_REQUIRE_{_variable(name)}",
    )
    for name in ["postgres", *REMOTE_BACKENDS, *CLUSTER_BACKENDS]
}
#: Engines from elsewhere as ``BACKENDS`` entries by alias, in JSON: set by --blamequeue-engine,
#: read by tests/settings.py (worker subprocesses too) and the conformance suite's parameters.
ENGINES_VARIABLE = "BLAMEQUEUE_TEST_ENGINES"


def backend_id(alias: str) -> str:
    """A backend's test id: its alias, but "sqlite" for the SQLite "default"."""
    return "sqlite" if alias == "default" else alias


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--blamequeue-engine",
        action="append",
        default=[],
        metavar="ALIAS=ENTRY",
        help="run the conformance suite on this backend too: ENTRY is a Backend subclass's "
        "dotted path, or a BLAMEQUEUE['BACKENDS'] entry as JSON (docs/writing-a-backend.md)",
    )


def engine_option(value: str) -> tuple[str, dict[str, Any]]:
    """``ALIAS=ENTRY`` of ``--blamequeue-engine`` as (alias, ``BACKENDS`` entry)."""
    alias, _, entry = value.partition("=")
    if not alias or not entry:
        raise pytest.UsageError(f"--blamequeue-engine {value!r}: expected ALIAS=ENTRY")
    if not entry.lstrip().startswith("{"):
        return alias, {"BACKEND": entry}
    try:
        parsed = json.loads(entry)
    except ValueError as exc:
        raise pytest.UsageError(f"--blamequeue-engine {value!r}: {exc}") from None
    return alias, parsed


def pytest_configure(config: pytest.Config) -> None:
    """The engines of ``--blamequeue-engine`` join the test settings' ``BACKENDS``."""
    engines = dict(engine_option(value) for value in config.getoption("blamequeue_engine"))
    if not engines:
        return
    os.environ[ENGINES_VARIABLE] = json.dumps(engines)
    backends = {**settings.BLAMEQUEUE["BACKENDS"], **engines}
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "BACKENDS": backends}


def external_engines() -> list[str]:
    """The aliases of the engines from elsewhere (``--blamequeue-engine``, or the variable)."""
    return list(json.loads(os.environ.get(ENGINES_VARIABLE) or "{}"))


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


@pytest.fixture(params=LOCAL_BACKENDS, ids=backend_id)
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
