"""What is specific to the local backend: the statements it sends to SQLite and PostgreSQL."""

from __future__ import annotations

import re

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from django_blamequeue import queue
from django_blamequeue.backends import get_backend

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

INSERT_JOB = re.compile(r'\s*INSERT\s+(OR\s+\w+\s+)?INTO\s+"?blamequeue_job"?[\s(]', re.I)


def test_enqueue_many_is_one_insert_statement_per_batch(backend: str) -> None:
    db = get_backend(backend).database
    assert db is not None
    with CaptureQueriesContext(connections[db]) as queries:
        queue.enqueue_many("batch", [{"i": i} for i in range(20)], backend=backend)
    inserts = [q["sql"] for q in queries.captured_queries if INSERT_JOB.match(q["sql"])]
    print(
        f"\n[{backend}] enqueue_many of 20: {len(queries.captured_queries)} statements, "
        f"{len(inserts)} insert into blamequeue_job"
    )
    assert len(inserts) == 1
