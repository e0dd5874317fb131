"""Enqueue: what a job holds, claim order, delays, batches, and refusals."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from django_blamequeue import EnqueuedJob, ErrorCode, JobInfo, QueueError, queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.core.validation import MAX_ENQUEUE_MANY
from django_blamequeue.serializers import decode

from .support import claim_one, jobs_in, later, nothing_written


def refused(call: Callable[..., Any], *args: Any, **kwargs: Any) -> QueueError:
    with pytest.raises(QueueError) as caught:
        call(*args, **kwargs)
    return caught.value


def test_enqueue_answers_an_enqueued_job(backend: str) -> None:
    enq = queue.enqueue("mail", {"to": "a@example.com"}, backend=backend)
    assert isinstance(enq, EnqueuedJob)
    assert (enq.queue_name, enq.backend, enq.deduplicated) == ("mail", backend, False)
    assert isinstance(enq.job_id, str) and len(enq.job_id) == 26


def test_job_info_holds_every_field_the_spec_lists(backend: str, engine: Backend) -> None:
    before = engine.now()
    enq = queue.enqueue(
        "mail",
        {"to": "a@example.com"},
        priority=5,
        max_attempts=7,
        classification="billing",
        trace_id="trace-1",
        dedupe_key="k1",
        backend=backend,
    )
    info = queue.get_job(enq.job_id, backend=backend)
    assert isinstance(info, JobInfo)
    assert dataclasses.is_dataclass(info)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.state = "done"  # type: ignore[misc]
    assert (info.job_id, info.backend, info.queue, info.name, info.state) == (
        enq.job_id,
        backend,
        "mail",
        "mail",
        "pending",
    )
    assert info.payload == {"to": "a@example.com"}
    assert (info.priority, info.attempts, info.max_attempts, info.progress) == (5, 0, 7, 0)
    assert (info.result, info.error, info.traceback) == (None, None, None)
    assert (info.classification, info.trace_id, info.dedupe_key) == ("billing", "trace-1", "k1")
    assert (info.flow_id, info.parent_id) == (None, None)
    assert info.created_at is not None and info.available_at is not None
    assert before - timedelta(seconds=1) <= info.created_at <= engine.now()
    assert info.available_at == info.created_at
    assert (info.started_at, info.finished_at) == (None, None)
    spec_fields = {
        "job_id",
        "backend",
        "queue",
        "name",
        "state",
        "payload",
        "priority",
        "attempts",
        "max_attempts",
        "progress",
        "result",
        "error",
        "traceback",
        "classification",
        "trace_id",
        "dedupe_key",
        "flow_id",
        "parent_id",
        "available_at",
        "created_at",
        "started_at",
        "finished_at",
    }
    assert spec_fields <= {f.name for f in dataclasses.fields(JobInfo)}


def test_defaults_are_three_attempts_priority_zero_and_a_generated_trace_id(backend: str) -> None:
    info = queue.get_job(queue.enqueue("mail", None, backend=backend).job_id, backend=backend)
    assert info is not None
    assert (info.max_attempts, info.priority, info.payload) == (3, 0, None)
    assert info.trace_id


def test_a_registered_job_is_stored_under_its_name_with_its_max_attempts(
    backend: str, register: Callable[..., Any]
) -> None:
    def send(payload: Any) -> None: ...

    definition = register(send, queue="emails", max_attempts=5)
    info = queue.get_job(definition.enqueue({"n": 1}, backend=backend).job_id, backend=backend)
    assert info is not None
    assert (info.queue, info.name, info.max_attempts) == ("emails", definition.name, 5)


@pytest.mark.requires("supports_priority")
def test_higher_priority_is_claimed_first_then_earlier_available_at_then_fifo(
    backend: str, engine: Backend
) -> None:
    now = engine.now()
    first_in, second_in = (
        e.job_id for e in queue.enqueue_many("order", ["fifo-1", "fifo-2"], backend=backend)
    )
    urgent = queue.enqueue("order", "urgent", priority=5, backend=backend).job_id
    older = queue.enqueue(
        "order", "older", run_at=now - timedelta(seconds=60), backend=backend
    ).job_id
    low = queue.enqueue(
        "order", "low", priority=-1, run_at=now - timedelta(seconds=120), backend=backend
    ).job_id
    claimed = [claim_one(engine, "order").job_id for _ in range(5)]
    assert claimed == [urgent, older, first_in, second_in, low]


@pytest.mark.requires("supports_priority")
def test_a_claim_over_several_queues_takes_the_best_jobs_of_all_and_at_most_its_limit(
    backend: str, engine: Backend
) -> None:
    low = queue.enqueue_many("mq-a", ["a0", "a1", "a2"], backend=backend)
    high = queue.enqueue_many("mq-b", ["b0", "b1"], priority=3, backend=backend)
    claimed = engine.claim(["mq-a", "mq-b"], 3, 30)
    assert [c.job_id for c in claimed] == [high[0].job_id, high[1].job_id, low[0].job_id]
    rest = engine.claim(["mq-a", "mq-b"], 10, 30)
    assert sorted(c.job_id for c in rest) == sorted([low[1].job_id, low[2].job_id])


@pytest.mark.requires("supports_priority")
def test_fifo_holds_across_a_large_batch(backend: str, engine: Backend) -> None:
    ids = [e.job_id for e in queue.enqueue_many("fifo", range(50), backend=backend)]
    claimed = [
        c.job_id
        for _ in range(5)
        for c in sorted(engine.claim(["fifo"], 10, 30), key=lambda c: c.job_id)
    ]
    assert claimed == ids


@pytest.mark.requires("supports_time_travel")
@pytest.mark.parametrize("how", ["delay", "run_at"])
def test_a_delayed_job_is_not_claimable_before_it_is_due(
    backend: str, engine: Backend, how: str
) -> None:
    now = engine.now()
    option = {"delay": 60} if how == "delay" else {"run_at": later(engine, 60, now)}
    job_id = queue.enqueue("later", {}, backend=backend, **option).job_id
    assert engine.claim(["later"], 10, 30, now=later(engine, 58, now)) == []
    assert queue.get_job(job_id, backend=backend).state == "pending"  # type: ignore[union-attr]
    assert [c.job_id for c in engine.claim(["later"], 10, 30, now=later(engine, 61, now))] == [
        job_id
    ]


def test_a_delay_counts_from_the_engines_clock(backend: str, engine: Backend) -> None:
    info = queue.get_job(
        queue.enqueue("later", {}, delay=90, backend=backend).job_id, backend=backend
    )
    assert info is not None and info.available_at is not None and info.created_at is not None
    assert info.available_at - info.created_at == timedelta(seconds=90)


def test_enqueue_many_answers_one_job_per_payload_in_order(backend: str, engine: Backend) -> None:
    got = queue.enqueue_many("batch", [{"i": i} for i in range(20)], backend=backend)
    assert [queue.get_job(e.job_id, backend=backend).payload for e in got] == [  # type: ignore[union-attr]
        {"i": i} for i in range(20)
    ]
    assert jobs_in(engine, "batch") == 20


@pytest.mark.parametrize(
    ("bad", "code"),
    [(object(), ErrorCode.BAD_PAYLOAD), ("x" * 1_100_000, ErrorCode.PAYLOAD_TOO_LARGE)],
    ids=["unencodable", "too-large"],
)
def test_enqueue_many_is_all_or_none(
    backend: str, engine: Backend, bad: Any, code: ErrorCode
) -> None:
    payloads = [{"i": 0}, {"i": 1}, bad, {"i": 3}]
    assert refused(queue.enqueue_many, "batch", payloads, backend=backend).code == code
    assert nothing_written(engine)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"payload": object()}, ErrorCode.BAD_PAYLOAD),
        ({"payload": {1, 2}}, ErrorCode.BAD_PAYLOAD),
        ({"payload": "x" * (1_048_576 + 1)}, ErrorCode.PAYLOAD_TOO_LARGE),
        ({"name": "tests.conformance.nobody.registered.this"}, ErrorCode.UNKNOWN_JOB),
        ({"queue_name": ""}, ErrorCode.MISSING_QUEUE),
        ({"queue_name": None}, ErrorCode.MISSING_QUEUE),
        ({"priority": "high"}, ErrorCode.BAD_ARGUMENT),
        ({"delay": -5}, ErrorCode.BAD_ARGUMENT),
    ],
    ids=[
        "object",
        "set",
        "over-1-MiB",
        "unknown-job",
        "empty-queue",
        "no-queue",
        "bad-priority",
        "negative-delay",
    ],
)
def test_bad_input_is_refused_and_writes_nothing(
    backend: str, engine: Backend, kwargs: dict[str, Any], code: ErrorCode
) -> None:
    args = {"queue_name": "mail", "payload": {"ok": True}, **kwargs}
    assert (
        refused(
            queue.enqueue, args.pop("queue_name"), args.pop("payload"), backend=backend, **args
        ).code
        == code
    )
    assert nothing_written(engine)


def test_a_payload_over_max_payload_bytes_is_too_large(
    backend: str, engine: Backend, configure: Callable[..., None]
) -> None:
    configure(MAX_PAYLOAD_BYTES=100)
    queue.enqueue("mail", "x" * 50, backend=backend)
    err = refused(queue.enqueue, "mail", "x" * 200, backend=backend)
    assert err.code == ErrorCode.PAYLOAD_TOO_LARGE and "100" in err.message
    assert jobs_in(engine, "mail") == 1


def test_a_serializer_outside_accept_content_is_refused_and_writes_nothing(
    backend: str, engine: Backend, configure: Callable[..., None]
) -> None:
    configure(SERIALIZER="pickle", ACCEPT_CONTENT=["json"])
    err = refused(queue.enqueue, "mail", {"a": 1}, backend=backend)
    assert err.code == ErrorCode.INVALID_CONFIG and "E008" in err.message
    configure()
    assert nothing_written(engine)


def test_a_stored_payload_of_a_refused_content_type_is_not_decoded(
    backend: str, engine: Backend, configure: Callable[..., None]
) -> None:
    """CONTENT_DISALLOWED: a pickled job (written while pickle was accepted) is never
    unpickled once ACCEPT_CONTENT refuses it; the worker fails it visibly instead."""
    configure(SERIALIZER="pickle", ACCEPT_CONTENT=["json", "pickle"])
    job_id = queue.enqueue("mail", {"a": 1}, backend=backend).job_id
    configure(SERIALIZER="json", ACCEPT_CONTENT=["json"])
    ran: list[Any] = []
    queue.consume("mail", lambda job, ctx: ran.append(job), backend=backend, poll_interval=0.05)
    from django_blamequeue.testing import wait_until

    assert wait_until(lambda: queue.get_job(job_id, backend=backend).state == "failed", 10)  # type: ignore[union-attr]
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and info.reason == "bad_job"
    assert "CONTENT_DISALLOWED" in (info.error or "")
    assert ran == []


def test_an_unknown_backend_is_refused_and_writes_nothing(backend: str, engine: Backend) -> None:
    assert refused(queue.enqueue, "mail", {}, backend="nope").code == ErrorCode.UNKNOWN_BACKEND
    assert nothing_written(engine)


def test_stats_count_delayed_jobs_apart_and_say_when_the_first_comes_due(
    backend: str, engine: Backend
) -> None:
    queue.enqueue("later", {}, backend=backend)
    queue.enqueue_many("later", [{}, {}], delay=600, backend=backend)
    [st] = [s for s in engine.stats() if s.queue == "later"]
    assert (st.counts["pending"], st.delayed) == (3, 2)
    assert st.next_delayed_in is not None and 590 < st.next_delayed_in <= 600
    queue.enqueue("due", {}, backend=backend)
    [due] = [s for s in engine.stats() if s.queue == "due"]
    assert (due.delayed, due.next_delayed_in) == (0, None)


#: Plain payloads that hold the JSON codec's ``__type__`` key but are not its marker.
TYPE_KEYED: list[Any] = [
    {"__type__": "bytes", "note": "not bytes"},
    {"__type__": "os.system"},
    {"__value__": "x"},
    {"outer": [{"__type__": "datetime", "__value__": "2026-01-01", "by": "user"}]},
]


def test_a_plain_payload_with_a_type_key_runs_as_it_was_enqueued(
    backend: str, engine: Backend
) -> None:
    got = queue.enqueue_many("typed", TYPE_KEYED, backend=backend)
    infos = [queue.get_job(e.job_id, backend=backend) for e in got]
    assert [i.payload for i in infos if i] == TYPE_KEYED
    ran = {}
    for _ in TYPE_KEYED:
        c = claim_one(engine, "typed")
        p = c.payload
        ran[c.job_id] = decode(p.content_type, p.content_encoding, p.body)
    assert [ran[e.job_id] for e in got] == TYPE_KEYED


@pytest.mark.parametrize(
    "payload",
    [
        {"__type__": "bytes", "__value__": "hello"},
        {"args": [1, {"__type__": "os.system", "__value__": "true"}]},
    ],
    ids=["top-level", "nested"],
)
def test_a_dict_that_is_the_codecs_marker_is_refused_and_nothing_written(
    backend: str, engine: Backend, payload: Any
) -> None:
    caught = refused(queue.enqueue_many, "typed", [{"i": 0}, payload], backend=backend)
    assert caught.code == ErrorCode.BAD_PAYLOAD
    assert "'__type__' and '__value__'" in caught.message
    assert nothing_written(engine)


def test_enqueue_many_past_its_bound_is_refused_without_reading_the_rest(
    backend: str, engine: Backend
) -> None:
    read = 0

    def payloads() -> Any:
        nonlocal read
        while True:  # endless: the call must stop reading one past the bound
            read += 1
            yield None

    caught = refused(queue.enqueue_many, "batch", payloads(), backend=backend)
    assert caught.code == ErrorCode.BAD_ARGUMENT
    assert f"at most {MAX_ENQUEUE_MANY:,} jobs in one call" in caught.message
    assert read == MAX_ENQUEUE_MANY + 1
    assert nothing_written(engine)
