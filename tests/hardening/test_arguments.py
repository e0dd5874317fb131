"""Bad arguments through the ``queue`` facade, on SQLite and PostgreSQL: a bad
argument is a ``QueueError`` with nothing written, and what is accepted reads back.

Each test walks its table of cases in one database setup (a flush per case would cost more
than the cases); a failure names the case."""

from __future__ import annotations

import functools
import math
import threading
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from django_blamequeue import ErrorCode, queue
from django_blamequeue.backends import get_backend
from django_blamequeue.core.validation import MAX_INT, MAX_SECONDS
from tests.conformance.support import claim_one, fail

from .conftest import refused, tables

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

MISSING_IDS = [None, "", "   ", 12345, b"01ABC", ["01ABC"], "a\x00b", "a\ud800", "x" * 256]


def deep(levels: int) -> Any:
    return functools.reduce(lambda inner, _: [inner], range(levels), 0)


def state(job_id: str, backend: str) -> str:
    info = queue.get_job(job_id, backend=backend)
    assert info is not None
    return info.state


# -- item 1: an id argument is never "any id" ------------------------------------------------
def test_cancel_flow_refuses_a_missing_flow_id_and_cancels_nothing(backend: str) -> None:
    loose = queue.enqueue("plain", {"n": 1}, backend=backend).job_id
    flow = queue.enqueue_flow("flows", [{"name": "a"}, {"name": "b"}], backend=backend)
    for flow_id in MISSING_IDS:
        assert refused(backend, queue.cancel_flow, flow_id) == ErrorCode.BAD_ARGUMENT, flow_id
    assert state(loose, backend) == "pending"
    assert {state(j["job_id"], backend) for j in flow["jobs"]} == {"pending"}


def test_flow_jobs_refuses_a_missing_flow_id_instead_of_listing_jobs(backend: str) -> None:
    queue.enqueue("plain", {"n": 1}, backend=backend)
    for flow_id in MISSING_IDS:
        assert refused(backend, queue.flow_jobs, flow_id) == ErrorCode.BAD_ARGUMENT, flow_id


def test_job_id_arguments_are_refused_unless_they_are_strings_that_can_be_ids(
    backend: str,
) -> None:
    waiting = queue.enqueue("plain", {"n": 1}, backend=backend).job_id
    for verb in (queue.get_job, queue.cancel, queue.dlq_retry):
        for job_id in MISSING_IDS:
            assert refused(backend, verb, job_id) == ErrorCode.BAD_ARGUMENT, (verb, job_id)
    assert state(waiting, backend) == "pending"


def test_a_well_formed_id_that_names_no_job_is_unknown_not_refused(backend: str) -> None:
    for job_id in ["01ZZZZZZZZZZZZZZZZZZZZZZZZ", "x" * 255, "ünïcode"]:
        assert queue.get_job(job_id, backend=backend) is None
        assert queue.cancel(job_id, backend=backend) is False
        assert queue.dlq_retry(job_id, backend=backend) is False
    assert queue.flow_jobs("x" * 255, backend=backend) == []
    assert queue.cancel_flow("x" * 255, backend=backend) == 0


# -- item 4: every time argument within what every engine stores --------------------------
def test_a_delay_past_100_years_is_refused_and_writes_nothing(backend: str) -> None:
    for delay in [1e12, MAX_SECONDS + 1, 10**30, timedelta(days=365 * 101), timedelta.max]:
        assert refused(backend, queue.enqueue, "q", 1, delay=delay) == ErrorCode.BAD_ARGUMENT


def test_the_longest_delay_is_stored_read_back_listed_and_cancelled(backend: str) -> None:
    job_id = queue.enqueue("q", 1, delay=MAX_SECONDS, backend=backend).job_id
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and info.available_at is not None
    years = (info.available_at - datetime.now(UTC)) / timedelta(days=365.25)
    assert 99.9 < years <= 100
    assert queue.size("q", backend=backend) == 1
    assert queue.cancel(job_id, backend=backend) is True


def test_a_run_at_outside_1970_to_100_years_ahead_is_refused(backend: str) -> None:
    for run_at in [
        datetime(9999, 12, 31, tzinfo=UTC),
        datetime.now(UTC) + timedelta(days=365 * 101),
        datetime(1969, 12, 31, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))),
        datetime.min.replace(tzinfo=UTC),
    ]:
        code = refused(backend, queue.enqueue, "q", 1, run_at=run_at)
        assert code == ErrorCode.BAD_ARGUMENT, run_at


def test_a_run_at_inside_the_bounds_reads_back(backend: str) -> None:
    far = datetime.now(UTC) + timedelta(days=365 * 99)
    job_id = queue.enqueue("q", 1, run_at=far, backend=backend).job_id
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and info.available_at is not None
    assert abs(info.available_at - far) < timedelta(seconds=1)


def test_a_run_at_with_any_utc_offset_is_stored_as_the_same_instant(backend: str) -> None:
    for hours in (16, -23, 23):  # PostgreSQL itself takes offsets up to ±15:59 only
        when = datetime(2030, 6, 1, 12, tzinfo=timezone(timedelta(hours=hours, minutes=59)))
        job_id = queue.enqueue("q", 1, run_at=when, backend=backend).job_id
        info = queue.get_job(job_id, backend=backend)
        assert info is not None and info.available_at == when, hours


def test_a_flow_child_delay_past_the_bound_refuses_the_whole_flow(backend: str) -> None:
    children = [{"name": "a"}, {"name": "b", "depends_on": ["a"], "delay": 1e12}]
    assert refused(backend, queue.enqueue_flow, "q", children) == ErrorCode.BAD_ARGUMENT


def test_extend_lease_refuses_infinity_and_past_the_bound(backend: str) -> None:
    answers: list[Any] = []

    def handler(job: Any, ctx: Any) -> None:
        for seconds in (math.inf, math.nan, MAX_SECONDS + 1, 0):
            try:
                ctx.extend_lease(seconds)
                answers.append("accepted")
            except Exception as exc:  # the code is asserted below
                answers.append(getattr(exc, "code", type(exc).__name__))

    if not get_backend(backend).supports_extend_lease:
        pytest.skip(f"{backend} cannot extend leases")
    queue.enqueue("lease-q", 1, backend=backend)
    consumer = queue.consume("lease-q", handler, backend=backend, burst=True, fast_poll=0.01)
    assert consumer.join(timeout=30)
    assert answers == [ErrorCode.BAD_ARGUMENT] * 4


# -- item 7: over-large ints, NUL, NaN, deep JSON, long node names ------------------------
ENQUEUE_REFUSALS: list[tuple[str, dict[str, Any], ErrorCode]] = [
    ("max_attempts 2**31", {"max_attempts": 2**31}, ErrorCode.BAD_ARGUMENT),
    ("max_attempts 2**63", {"max_attempts": 2**63}, ErrorCode.BAD_ARGUMENT),
    ("priority 2**31", {"priority": 2**31}, ErrorCode.BAD_ARGUMENT),
    ("NUL class", {"classification": "a\x00b"}, ErrorCode.BAD_ARGUMENT),
    ("NUL trace id", {"trace_id": "a\x00b"}, ErrorCode.BAD_ARGUMENT),
    ("NUL dedupe key", {"dedupe_key": "a\x00b"}, ErrorCode.BAD_ARGUMENT),
    ("NUL queue", {"queue_name": "q\x00"}, ErrorCode.MISSING_QUEUE),
    ("surrogate queue", {"queue_name": "q\udcff"}, ErrorCode.MISSING_QUEUE),
    ("surrogate key", {"dedupe_key": "\ud800"}, ErrorCode.BAD_ARGUMENT),
    ("surrogate class", {"classification": "c\udfff"}, ErrorCode.BAD_ARGUMENT),
    ("NaN", {"payload": math.nan}, ErrorCode.BAD_PAYLOAD),
    ("Infinity", {"payload": {"x": [1, math.inf]}}, ErrorCode.BAD_PAYLOAD),
    ("-Infinity", {"payload": -math.inf}, ErrorCode.BAD_PAYLOAD),
    ("30k-deep JSON", {"payload": deep(30_000)}, ErrorCode.BAD_PAYLOAD),
    ("101-deep JSON", {"payload": deep(101)}, ErrorCode.BAD_PAYLOAD),
    ("5001-digit int", {"payload": 10**5000}, ErrorCode.BAD_PAYLOAD),
]


def test_enqueue_refuses_what_no_engine_stores_and_writes_nothing(backend: str) -> None:
    for label, changes, code in ENQUEUE_REFUSALS:
        args = {"queue_name": "q", "payload": 1, **changes}
        name, payload = args.pop("queue_name"), args.pop("payload")
        assert refused(backend, queue.enqueue, name, payload, **args) == code, label


def test_a_batch_with_one_nan_payload_writes_none_of_the_batch(backend: str) -> None:
    payloads = [{"n": 1}, {"n": 2}, {"n": math.nan}, {"n": 4}]
    assert refused(backend, queue.enqueue_many, "q", payloads) == ErrorCode.BAD_PAYLOAD


def test_a_payload_nests_at_most_100_levels(backend: str) -> None:
    job_id = queue.enqueue("q", deep(100), backend=backend).job_id
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and info.payload == deep(100)


def test_the_largest_stored_ints_are_accepted_and_read_back(backend: str) -> None:
    job_id = queue.enqueue(
        "q", 2**64, priority=MAX_INT, max_attempts=MAX_INT, backend=backend
    ).job_id
    info = queue.get_job(job_id, backend=backend)
    assert info is not None
    assert (info.priority, info.max_attempts, info.payload) == (MAX_INT, MAX_INT, 2**64)
    low = queue.enqueue("q", 1, priority=-MAX_INT, backend=backend).job_id
    assert queue.get_job(low, backend=backend).priority == -MAX_INT  # type: ignore[union-attr]


def test_words_nan_and_infinity_in_strings_are_an_ordinary_payload(backend: str) -> None:
    payload = {"NaN": "Infinity", "text": "-Infinity is not NaN"}
    job_id = queue.enqueue("q", payload, backend=backend).job_id
    assert queue.get_job(job_id, backend=backend).payload == payload  # type: ignore[union-attr]


def test_dlq_list_refuses_ints_past_the_bound_and_pages_at_it(backend: str) -> None:
    for limit, offset in [(10**20, 0), (1, 10**20), (2**31, 0), (1, -1)]:
        code = refused(backend, queue.dlq_list, "q", limit=limit, offset=offset)
        assert code == ErrorCode.BAD_ARGUMENT, (limit, offset)
    engine = get_backend(backend)
    job_id = queue.enqueue("q", 1, max_attempts=1, backend=backend).job_id
    fail(engine, claim_one(engine, "q"))
    assert [j.job_id for j in queue.dlq_list("q", limit=MAX_INT, backend=backend)] == [job_id]
    assert queue.dlq_list("q", limit=MAX_INT, offset=MAX_INT, backend=backend) == []


def test_a_flow_node_name_past_the_column_or_with_nul_is_bad_flow(backend: str) -> None:
    for name in ["x" * 256, "a\x00b", "\x00", "a\ud800"]:
        children = [{"name": "first"}, {"name": name, "depends_on": ["first"]}]
        assert refused(backend, queue.enqueue_flow, "q", children) == ErrorCode.BAD_FLOW, name


def test_a_flow_node_name_of_255_characters_is_stored_whole(backend: str) -> None:
    name = "n" * 255
    flow = queue.enqueue_flow("q", [{"name": name}], backend=backend)
    (info,) = queue.flow_jobs(flow["flow_id"], backend=backend)
    assert info.flow_key == name


def test_a_flow_child_with_a_nan_payload_refuses_the_whole_flow(backend: str) -> None:
    children = [{"name": "a", "payload": 1}, {"name": "b", "payload": [math.nan]}]
    assert refused(backend, queue.enqueue_flow, "q", children) == ErrorCode.BAD_PAYLOAD


CONSUMER_REFUSALS: list[dict[str, Any]] = [
    {"lease": 0},
    {"lease": 0.0},
    {"lease": 1e300},
    {"concurrency": 100_000},
    {"concurrency": MAX_INT},
    {"poll_interval": 1e12},
    {"fast_poll": math.inf},
    {"rate_limit": (1, 1e12)},
    {"rate_limit": (2**31, 1)},
]


def test_consume_refuses_options_past_the_bound_and_starts_no_thread(backend: str) -> None:
    threads = threading.active_count()
    before = tables(backend)
    for options in CONSUMER_REFUSALS:
        code = refused(backend, queue.consume, "q", lambda job, ctx: None, **options)
        assert code in (ErrorCode.BAD_ARGUMENT, ErrorCode.BAD_RATE_LIMIT), options
        assert queue._consumers == [] and threading.active_count() == threads, options
    assert tables(backend) == before


def test_consume_with_lease_none_takes_the_default_lease(backend: str) -> None:
    consumer = queue.consume("q", lambda job, ctx: None, backend=backend, lease=None, burst=True)
    assert consumer.options.lease == 30.0
    assert consumer.join(timeout=30)
