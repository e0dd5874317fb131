"""Fixtures for the backend-specific tests: an SQS backend per test, its ledger on SQLite or
PostgreSQL, on a queue prefix of its own (moto keeps queues across tests)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from django.conf import settings
from pytest_django import Settings as SettingsWrapper

from django_blamequeue.backends import get_backend
from django_blamequeue.backends.sqs import SqsBackend
from tests.conftest import need_server

_prefixes = itertools.count()
LEDGERS = ["default", "postgres"]


def sqs_options(**extra: Any) -> dict[str, Any]:
    """The test settings' sqs entry with a prefix nobody else uses, plus ``extra``."""
    base = dict(settings.BLAMEQUEUE["BACKENDS"]["sqs"])
    base["QUEUE_PREFIX"] = f"{base['QUEUE_PREFIX']}b{next(_prefixes)}-"
    return {**base, **extra}


@pytest.fixture(params=LEDGERS, ids=["ledger-sqlite", "ledger-postgres"])
def ledger(request: pytest.FixtureRequest) -> str:
    """The Django database that holds the ledger."""
    alias: str = request.param
    need_server("sqs")
    if alias == "postgres":
        need_server("postgres")
    return alias


@pytest.fixture
def configure_sqs(settings: SettingsWrapper, ledger: str) -> Any:
    """``configure_sqs(**options)``: the "sqs" backend rebuilt with these options."""

    def apply(**options: Any) -> SqsBackend:
        settings.BLAMEQUEUE = {
            **settings.BLAMEQUEUE,
            "BACKENDS": {
                **settings.BLAMEQUEUE["BACKENDS"],
                "sqs": sqs_options(DATABASE=ledger, **options),
            },
        }
        backend = get_backend("sqs")
        assert isinstance(backend, SqsBackend)
        return backend

    return apply


@pytest.fixture
def sqs(configure_sqs: Any) -> SqsBackend:
    """The "sqs" backend on a fresh queue prefix, its ledger on the ``ledger`` database."""
    backend: SqsBackend = configure_sqs()
    return backend
