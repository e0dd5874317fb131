"""A slot thread keeps its database connection from job to job, whatever
``CONN_MAX_AGE`` says (0 here, Django's default), and replaces it only when it cannot be
trusted: after a database error in the job, or when the handler left a transaction open."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.db.backends.signals import connection_created

from django_blamequeue import queue
from django_blamequeue.testing import wait_until


@pytest.fixture
def opened() -> Iterator[Counter[str]]:
    """Connections opened, by the name of the thread that opened them."""
    counts: Counter[str] = Counter()

    def count(sender: Any, connection: Any, **kwargs: Any) -> None:
        counts[threading.current_thread().name] += 1

    connection_created.connect(count, weak=False)
    yield counts
    connection_created.disconnect(count)


def database_of(backend: str) -> str:
    return str(settings.BLAMEQUEUE["BACKENDS"][backend].get("DATABASE", "default"))


def run_all(backend: str, handler: Any, n: int, concurrency: int) -> list[Any]:
    seen: list[Any] = []

    def record(job: Any, ctx: Any) -> None:
        seen.append(handler(job.payload))

    queue.enqueue_many("conns", [{"i": i} for i in range(n)], backend=backend)
    consumer = queue.consume(
        "conns", record, backend=backend, concurrency=concurrency, poll_interval=0.05
    )
    try:
        assert wait_until(lambda: len(seen) == n, 20)
    finally:
        consumer.cancel()
        assert consumer.join(10)
    return seen


def test_a_slot_keeps_its_connection_across_jobs_with_conn_max_age_0(
    backend: str, opened: Counter[str]
) -> None:
    db = database_of(backend)
    assert settings.DATABASES[db].get("CONN_MAX_AGE", 0) == 0

    def query(payload: Any) -> str:
        with connections[db].cursor() as cur:
            cur.execute("SELECT 1")
        return threading.current_thread().name

    threads = run_all(backend, query, 12, concurrency=2)
    assert set(threads) == {"blamequeue-slot"}
    assert 1 <= opened["blamequeue-slot"] <= 2  # one per slot thread, not one per job


def test_a_slot_reconnects_after_a_database_error_in_the_job(
    backend: str, opened: Counter[str]
) -> None:
    db = database_of(backend)

    def query(payload: Any) -> None:
        with connections[db].cursor() as cur:
            if payload["i"] == 0:
                # caught by the handler: the job succeeds, but the session is suspect
                with contextlib.suppress(DatabaseError):
                    cur.execute("SELECT * FROM no_such_table_here")
            else:
                cur.execute("SELECT 1")

    run_all(backend, query, 3, concurrency=1)
    assert opened["blamequeue-slot"] == 2  # the first job's, then one for the next two


def test_a_transaction_a_handler_left_open_does_not_reach_the_next_job(
    backend: str, opened: Counter[str]
) -> None:
    db = database_of(backend)

    def leave_open(payload: Any) -> bool:
        autocommit = transaction.get_autocommit(using=db)
        if payload["i"] == 0:
            transaction.set_autocommit(False, using=db)
            with connections[db].cursor() as cur:
                cur.execute("SELECT 1")
        return autocommit

    assert run_all(backend, leave_open, 2, concurrency=1) == [True, True]
    assert opened["blamequeue-slot"] == 2
