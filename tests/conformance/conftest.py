"""Fixtures of the conformance suite: every test runs once per backend (``backend`` fixture)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from pytest_django import Settings as SettingsWrapper

from django_blamequeue.backends import get_backend
from django_blamequeue.backends.base import Backend
from django_blamequeue.jobs import registry
from django_blamequeue.jobs.registry import JobDefinition
from tests.conftest import (
    ALL_BACKENDS,
    CLUSTER_BACKENDS,
    backend_id,
    external_engines,
    isolate,
    need_server,
)

_names = itertools.count()


#: The modules run on the Redis Cluster backend by default: the paths where a cluster client
#: differs from one server (script transactions, pub/sub wake-ups, scans over the nodes, key
#: rotation's scan of one slot, the outbox between backends, rescue and retention). The redis
#: backend runs the same scripts on both, so the rest is the redis run's;
#: ``BLAMEQUEUE_TEST_CLUSTER_SUITE=full`` runs it all on the cluster too (about 70 s here).
CLUSTER_SUBSET = frozenset(
    f"test_{name}.py"
    for name in (
        "smoke",
        "enqueue",
        "lease",
        "flows_parent_child",
        "flows_dag",
        "transactions",
        "workers",
        "slot_connections",
        "routing",
        "rescue",
        "retention",
        "bulk_edits",
        "liveness",
        "backlog",
        "encryption",  # rotate-keys scans the job hashes: on a cluster, on the slot's node
    )
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Transactional, flushing only the job tables (``available_apps``: no post_migrate).

    A test parametrized by ``backend`` may touch only that backend's database (and "default",
    which Django's test setup needs), so a PostgreSQL backend that strays into another
    database fails loudly; the rest may touch every database. On ``redis-cluster`` only the
    modules of ``CLUSTER_SUBSET`` run, unless the whole suite is asked for.
    """
    if os.environ.get("BLAMEQUEUE_TEST_CLUSTER_SUITE") != "full":
        skipped = [item for item in items if _outside_cluster_subset(item)]
        if skipped:
            config.hook.pytest_deselected(items=skipped)
            items[:] = [item for item in items if not _outside_cluster_subset(item)]
    for item in items:
        if "conformance" not in str(item.fspath):
            continue
        callspec = getattr(item, "callspec", None)
        alias = callspec.params.get("backend") if callspec is not None else None
        if item.get_closest_marker("all_databases") is not None or alias is None:
            databases: Any = "__all__"
        else:
            # "default" too: Django sets up the other test databases after it
            databases = sorted({_database_of(alias), "default"})
        item.add_marker(
            pytest.mark.django_db(
                transaction=True, databases=databases, available_apps=["django_blamequeue"]
            )
        )


def _outside_cluster_subset(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    alias = callspec.params.get("backend") if callspec is not None else None
    return (
        alias == "redis-cluster"
        and "conformance" in str(item.fspath)
        and item.fspath.basename not in CLUSTER_SUBSET
    )


def _database_of(alias: str) -> str:
    return str(settings.BLAMEQUEUE["BACKENDS"].get(alias, {}).get("DATABASE", "default"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that uses ``backend`` runs once per backend: the table's, then the engines of
    ``--blamequeue-engine`` (read here, after the options: not when this module is imported)."""
    if "backend" in metafunc.fixturenames:
        aliases = [*ALL_BACKENDS, *CLUSTER_BACKENDS, *external_engines()]
        metafunc.parametrize("backend", aliases, ids=backend_id, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest, settings: SettingsWrapper) -> str:
    """The backend under test: every conformance test runs once per backend.

    Redis and SQS keep their data outside the test databases, so each test gets a fresh key /
    queue prefix instead of a flush. A test marked ``requires("flag")`` is skipped where the
    backend's capability flag is False (e.g. SQS cannot move its delivery clock).
    """
    alias: str = request.param
    need_server(alias)
    isolate(settings, alias, f"c{next(_names)}")
    request.getfixturevalue("transactional_db")
    for marker in request.node.iter_markers("requires"):
        for flag in marker.args:
            wanted = not flag.startswith("!")
            value = bool(getattr(get_backend(alias), flag.lstrip("!")))
            if value != wanted:
                pytest.skip(f"backend {alias!r} has {flag.lstrip('!')} = {value}")
    return alias


@pytest.fixture
def engine(backend: str) -> Backend:
    """The ``Backend`` object under test, for driving its verbs directly."""
    return get_backend(backend)


@pytest.fixture
def register() -> Iterator[Callable[..., JobDefinition]]:
    """``register(func, **job_options)``: a throwaway ``@job`` with a unique name."""
    made: list[str] = []

    def make(func: Callable[..., Any], **options: Any) -> JobDefinition:
        options.setdefault("name", f"tests.conformance.{func.__name__}.{next(_names)}")
        options.setdefault("queue", f"q-{func.__name__}-{next(_names)}")
        definition = registry.job(**options)(func)
        made.append(definition.name)
        return definition

    yield make
    for name in made:
        registry.unregister(name)


@pytest.fixture
def configure(settings: SettingsWrapper) -> Callable[..., None]:
    """``configure(AUDIT="all", ...)``: the test ``BLAMEQUEUE`` with some keys replaced."""
    base: dict[str, Any] = {}

    def apply(**overrides: Any) -> None:
        if not base:  # read at first use: after the ``backend`` fixture set its prefix
            base.update(settings.BLAMEQUEUE)
        settings.BLAMEQUEUE = {**base, **overrides}

    return apply


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "all_databases: the test may touch every configured database"
    )
    config.addinivalue_line(
        "markers", "requires(*flags): skip where a backend's flag is False ('!flag': where True)"
    )
