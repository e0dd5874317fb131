"""Shared fixtures: a clean environment, backends per database, consumers stopped per test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from django.conf import settings

for _name in list(os.environ):
    if _name.startswith("BLAMEQUEUE_") and not _name.startswith("BLAMEQUEUE_TEST_"):
        del os.environ[_name]

LOCAL_BACKENDS = ["default", "postgres"]  # default = SQLite


def postgres_available() -> bool:
    return "postgres" in settings.DATABASES


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if postgres_available():
        return
    required = os.environ.get("BLAMEQUEUE_TEST_REQUIRE_POSTGRES") == "1"
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("backend") == "postgres":
            if required:
                item.add_marker(pytest.mark.xfail(reason="PostgreSQL required", strict=True))
            else:
                item.add_marker(pytest.mark.skip(reason="no BLAMEQUEUE_TEST_POSTGRES_URL"))


@pytest.fixture(params=LOCAL_BACKENDS, ids=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """The backend alias under test; the conformance suite runs once per value."""
    alias: str = request.param
    if alias == "postgres" and not postgres_available():
        pytest.skip("no BLAMEQUEUE_TEST_POSTGRES_URL")
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
