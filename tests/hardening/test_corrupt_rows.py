"""A stored job whose fields have the wrong type (a row or hash written past
the API) fails alone as ``bad_job``; it never fails the claim, so the jobs around it run.

SQLite keeps any value in any column and Redis any string in a hash field; PostgreSQL's typed
columns refuse such rows, so it is not among the engines here. The SQS backend's ledger is
a SQLite table in these tests.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from django.db import connections
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.jobtable.sql import CLAIM_COLUMNS
from tests.conftest import isolate, need_server

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

_tags = itertools.count()
#: field → a value of the wrong type, and the words of the job's error that name it.
CORRUPTIONS: dict[str, tuple[Any, str]] = {
    "priority": ("high", "the stored priority is not an integer: 'high'"),
    "max_attempts": ("many", "the stored max_attempts is not an integer: 'many'"),
    "timeout": ("soon", "the stored timeout is not a number of seconds: 'soon'"),
    "payload": (42, "the stored payload is not bytes: 42"),
}
REDIS_FIELDS = {"payload": None}  # a hash field is always a string: no wrong type to give it


@pytest.fixture(params=["default", "redis", "sqs"], ids=["sqlite", "redis", "sqs"])
def engine_alias(request: pytest.FixtureRequest, settings: SettingsWrapper) -> str:
    alias: str = request.param
    need_server(alias)
    isolate(settings, alias, f"corrupt{next(_tags)}")
    return alias


def corrupt(alias: str, job_id: str, field: str, value: Any) -> None:
    backend: Any = get_backend(alias)
    if alias == "redis":
        backend.client.hset(backend.keys.job(job_id), field, value)
        return
    with connections[backend.db].cursor() as cur:  # past the ORM: as a hand-written UPDATE
        cur.execute(
            f"UPDATE {backend.jobtable.name} SET {field} = %s WHERE id = %s", [value, job_id]
        )


def test_a_job_with_a_field_of_the_wrong_type_fails_alone_and_the_others_run(
    engine_alias: str,
) -> None:
    fields = [f for f in CORRUPTIONS if not (engine_alias == "redis" and f in REDIS_FIELDS)]
    payloads: list[dict[str, Any]] = [{"n": i} for i in range(8)]
    for i, field in enumerate(fields):  # among the good ones, claimed in one batch with them
        payloads.insert(2 * i + 1, {"corrupt": field})
    jobs = queue.enqueue_many("corrupt", payloads, backend=engine_alias)
    for payload, j in zip(payloads, jobs, strict=True):
        if "corrupt" in payload:
            corrupt(engine_alias, j.job_id, payload["corrupt"], CORRUPTIONS[payload["corrupt"]][0])

    consumer = queue.consume(
        "corrupt", lambda job, ctx: job.payload, backend=engine_alias, concurrency=4, burst=True
    )
    assert consumer.join(timeout=60), "the worker did not drain the queue"

    infos = [queue.get_job(j.job_id, backend=engine_alias) for j in jobs]
    for payload, info in zip(payloads, infos, strict=True):
        assert info is not None
        if "corrupt" in payload:
            assert (info.state, info.reason, info.attempts) == ("failed", "bad_job", 1)
            assert CORRUPTIONS[payload["corrupt"]][1] in (info.error or ""), info.error
        else:
            assert (info.state, info.result) == ("done", payload)
    assert consumer.counters.failed == len(fields)


def test_a_sqlite_job_whose_available_at_is_no_time_fails_alone_and_burst_exits() -> None:
    payloads: list[dict[str, Any]] = [{"n": 1}, {"corrupt": "available_at"}, {"n": 2}]
    jobs = queue.enqueue_many("corrupt-at", payloads, backend="default")
    corrupt("default", jobs[1].job_id, "available_at", "not a time")
    consumer = queue.consume(
        "corrupt-at", lambda job, ctx: job.payload, backend="default", concurrency=2, burst=True
    )
    assert consumer.join(timeout=30), "the burst worker did not exit"

    infos = [queue.get_job(j.job_id, backend="default") for j in jobs]
    assert [(i.state, i.reason) for i in infos if i] == [
        ("done", None),
        ("failed", "bad_job"),
        ("done", None),
    ]
    assert "the stored available_at is not a time" in (infos[1].error or ""), infos[1].error
    assert get_backend("default").stats()  # the console's figures read past such a row


#: Every column a claim reads (its id aside, and the lease token, which the claim writes),
#: each with a value of another kind than the column holds.
_TIMES = ("lease_expires_at", "available_at", "created_at")
_NUMBERS = ("attempts", "max_attempts", "priority", "timeout", "flow_depth", "stalls", "snoozes")
COLUMNS = [c.strip() for c in CLAIM_COLUMNS.split(",")][1:]
COLUMNS.remove("lease_token")
#: The Redis hash field of each column (the codec's names), where they differ.
REDIS_NAMES = {
    "content_type": "ctype",
    "content_encoding": "cenc",
    "lease_expires_at": "expires",
    "available_at": "avail",
    "created_at": "created",
    "concurrency_key": "ckey",
}


def wrong_value(column: str) -> Any:
    if column in _TIMES:
        return "not a time"
    if column in _NUMBERS:
        return "many"
    return 42  # text (and the payload's bytes) given a number


def test_a_job_corrupt_in_any_column_never_stalls_the_queue_or_the_read_outs(
    engine_alias: str,
) -> None:
    """Fuzzing every column: the burst worker exits, the good jobs run, no corrupt job stays
    in flight, and the job look-up and the queue figures read past every such row. (A Redis
    job whose ``queue`` field names another queue than the index it waits in runs in the
    index's queue; an SQS ledger row naming another queue than its message's is a moved
    job, its message deleted, the row left pending where it says it is.)"""
    columns = [c for c in COLUMNS if not (engine_alias == "redis" and c == "payload")]
    payloads: list[dict[str, Any]] = [{"n": i} for i in range(4)]
    payloads += [{"corrupt": c} for c in columns]
    jobs = queue.enqueue_many("corrupt-all", payloads, backend=engine_alias)
    for payload, j in zip(payloads, jobs, strict=True):
        if "corrupt" in payload:
            column = payload["corrupt"]
            field = REDIS_NAMES.get(column, column) if engine_alias == "redis" else column
            corrupt(engine_alias, j.job_id, field, wrong_value(column))

    consumer = queue.consume(
        "corrupt-all", lambda job, ctx: job.payload, backend=engine_alias, concurrency=4, burst=True
    )
    drained = consumer.join(timeout=20)
    consumer.cancel()
    consumer.join(10)
    states: dict[str, str] = {}
    for payload, j in zip(payloads, jobs, strict=True):
        info = queue.get_job(j.job_id, backend=engine_alias)
        states[payload.get("corrupt", "good")] = info.state if info else "gone"
        if "corrupt" not in payload:
            assert info is not None and info.state == "done", info
    assert drained, f"the worker did not drain the queue: {states}"
    assert "inflight" not in states.values(), states
    assert get_backend(engine_alias).stats()
    print(f"\n  corrupt columns[{engine_alias}]: {states}")
