"""DAG flows: one transaction (all rows or none); dependants blocked until every
dependency is done; a dependency in the DLQ keeps them blocked until retried and done."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from django_blamequeue import ErrorCode, QueueError, queue
from django_blamequeue.audit import FLOW_ENQUEUE
from django_blamequeue.backends.base import Backend
from django_blamequeue.core import lifecycle
from django_blamequeue.jobs import enqueueing
from django_blamequeue.testing import capture_events, wait_until

from .support import ack, claim_one, fail, nothing_written, outcome, succeed


def flow(backend: str, *children: dict[str, Any], queue_name: str = "dag") -> dict[str, str]:
    made = queue.enqueue_flow(queue_name, list(children), backend=backend)
    return {j["name"]: j["job_id"] for j in made["jobs"]}


def states(backend: str, ids: dict[str, str]) -> dict[str, str]:
    return {
        name: queue.get_job(job_id, backend=backend).state  # type: ignore[union-attr]
        for name, job_id in ids.items()
    }


def claim_named(engine: Backend, ids: dict[str, str], name: str) -> Any:
    c = claim_one(engine, "dag")
    assert c.job_id == ids[name], f"expected {name} to be the claimable job"
    return c


def test_enqueue_flow_answers_the_flow_id_and_a_job_per_child(backend: str) -> None:
    made = queue.enqueue_flow(
        "dag",
        [{"name": "a", "payload": {"x": 1}}, {"name": "b", "depends_on": ["a"], "priority": 3}],
        backend=backend,
    )
    assert [j["name"] for j in made["jobs"]] == ["a", "b"]
    a, b = (queue.get_job(j["job_id"], backend=backend) for j in made["jobs"])
    assert a is not None and b is not None
    assert (a.flow_id, b.flow_id) == (made["flow_id"], made["flow_id"])
    assert (a.state, a.payload, b.state, b.priority) == ("pending", {"x": 1}, "blocked", 3)
    assert b.depends_on == (a.job_id,)


@pytest.mark.parametrize(
    ("bad_child", "code"),
    [
        ({"name": "c", "payload": object()}, ErrorCode.BAD_PAYLOAD),
        ({"name": "c", "job": "tests.conformance.nobody.registered"}, ErrorCode.UNKNOWN_JOB),
        ({"name": "c", "depends_on": ["ghost"]}, ErrorCode.FLOW_UNKNOWN_DEP),
        ({"name": "a"}, ErrorCode.BAD_FLOW),
        ({"name": "c", "priority": "high"}, ErrorCode.BAD_ARGUMENT),
    ],
    ids=["bad-payload", "unknown-job", "unknown-dep", "duplicate-name", "bad-priority"],
)
def test_a_bad_child_writes_nothing(
    backend: str, engine: Backend, bad_child: dict[str, Any], code: ErrorCode
) -> None:
    children = [{"name": "a"}, {"name": "b", "depends_on": ["a"]}, bad_child]
    with pytest.raises(QueueError) as caught:
        queue.enqueue_flow("dag", children, backend=backend)
    assert caught.value.code == code
    assert nothing_written(engine)


def test_a_cycle_writes_nothing_and_shows_its_path(backend: str, engine: Backend) -> None:
    with pytest.raises(QueueError) as caught:
        queue.enqueue_flow(
            "dag",
            [{"name": "a", "depends_on": ["b"]}, {"name": "b", "depends_on": ["a"]}],
            backend=backend,
        )
    assert caught.value.code == ErrorCode.FLOW_CYCLE and "a → b → a" in caught.value.message
    assert nothing_written(engine)


def test_the_flow_is_registered_with_one_audit_event(backend: str) -> None:
    with capture_events() as events:
        made = queue.enqueue_flow("dag", [{"name": "a"}, {"name": "b"}], backend=backend)
    flow_events = events.of(FLOW_ENQUEUE)
    assert [(e.data["flow_id"], e.data["jobs"]) for e in flow_events] == [(made["flow_id"], 2)]


def test_a_dependant_stays_blocked_until_every_dependency_is_done(
    backend: str, engine: Backend
) -> None:
    ids = flow(backend, {"name": "a"}, {"name": "b"}, {"name": "c", "depends_on": ["a", "b"]})
    assert states(backend, ids) == {"a": "pending", "b": "pending", "c": "blocked"}
    ca, cb = sorted(engine.claim(["dag"], 10, 30), key=lambda c: c.job_id)
    assert {ca.job_id, cb.job_id} == {ids["a"], ids["b"]}
    succeed(engine, ca)
    assert states(backend, ids)["c"] == "blocked"
    assert engine.claim(["dag"], 10, 30) == []
    succeed(engine, cb)
    assert states(backend, ids)["c"] == "pending"
    assert claim_one(engine, "dag").job_id == ids["c"]


def test_a_retrying_dependency_keeps_its_dependants_blocked(backend: str, engine: Backend) -> None:
    ids = flow(backend, {"name": "a", "max_attempts": 3}, {"name": "b", "depends_on": ["a"]})
    assert fail(engine, claim_named(engine, ids, "a")).state == "pending"
    assert states(backend, ids) == {"a": "pending", "b": "blocked"}


def test_a_dependency_in_the_dlq_keeps_dependants_blocked_until_retried_and_done(
    backend: str, engine: Backend
) -> None:
    ids = flow(
        backend,
        {"name": "a", "max_attempts": 1},
        {"name": "b", "depends_on": ["a"]},
        {"name": "c", "depends_on": ["b"]},
    )
    assert fail(engine, claim_named(engine, ids, "a")).state == "failed"
    assert states(backend, ids) == {"a": "failed", "b": "blocked", "c": "blocked"}
    assert queue.dlq_retry(ids["a"], backend=backend)
    assert states(backend, ids) == {"a": "pending", "b": "blocked", "c": "blocked"}
    succeed(engine, claim_named(engine, ids, "a"))
    assert states(backend, ids) == {"a": "done", "b": "pending", "c": "blocked"}
    succeed(engine, claim_named(engine, ids, "b"))
    assert states(backend, ids)["c"] == "pending"


def test_cancelling_a_dependency_cancels_its_blocked_dependants(
    backend: str, engine: Backend
) -> None:
    ids = flow(
        backend,
        {"name": "a"},
        {"name": "b", "depends_on": ["a"]},
        {"name": "c", "depends_on": ["b"]},
        {"name": "other"},
    )
    assert queue.cancel(ids["a"], backend=backend)
    assert states(backend, ids) == {
        "a": "cancelled",
        "b": "cancelled",
        "c": "cancelled",
        "other": "pending",
    }


def test_cancel_flow_counts_the_jobs_it_cancelled(backend: str, engine: Backend) -> None:
    ids = flow(
        backend,
        {"name": "a"},
        {"name": "b", "depends_on": ["a"]},
        {"name": "c", "depends_on": ["a"]},
        {"name": "d", "depends_on": ["b"]},
    )
    succeed(engine, claim_named(engine, ids, "a"))
    running = claim_one(engine, "dag")  # b or c
    flow_id = queue.get_job(ids["a"], backend=backend).flow_id  # type: ignore[union-attr]
    assert flow_id is not None
    assert queue.cancel_flow(flow_id, backend=backend) == 3  # the running one, the pending one, d
    after = states(backend, ids)
    running_name = next(n for n, i in ids.items() if i == running.job_id)
    assert after.pop("a") == "done"
    assert after.pop(running_name) == "inflight"  # told; its worker acks it as cancelled
    assert set(after.values()) == {"cancelled"}
    assert queue.get_job(running.job_id, backend=backend).cancel_requested  # type: ignore[union-attr]
    assert queue.cancel_flow(flow_id, backend=backend) == 1  # only the running one is left
    told = ack(engine, running, outcome(running, lifecycle.Cancelled()))
    assert told.state == "cancelled"
    assert queue.cancel_flow(flow_id, backend=backend) == 0


def test_a_diamond_runs_each_node_once_and_in_dependency_order(backend: str) -> None:
    spans: dict[str, tuple[float, float]] = {}
    lock = threading.Lock()

    def handler(job: Any, ctx: Any) -> None:
        start = time.monotonic()
        time.sleep(0.05)  # the work: long enough that overlap would show
        with lock:
            assert job.payload not in spans, f"{job.payload} ran twice"
            spans[job.payload] = (start, time.monotonic())

    ids = flow(
        backend,
        {"name": "a", "payload": "a"},
        {"name": "b", "payload": "b", "depends_on": ["a"]},
        {"name": "c", "payload": "c", "depends_on": ["a"]},
        {"name": "d", "payload": "d", "depends_on": ["b", "c"]},
    )
    queue.consume("dag", handler, backend=backend, concurrency=3, poll_interval=0.05)
    assert wait_until(lambda: states(backend, ids)["d"] == "done", 15)
    assert set(spans) == {"a", "b", "c", "d"}
    assert spans["a"][1] <= spans["b"][0] and spans["a"][1] <= spans["c"][0]
    assert max(spans["b"][1], spans["c"][1]) <= spans["d"][0]
    assert set(states(backend, ids).values()) == {"done"}


@pytest.mark.all_databases
def test_cancel_flow_without_a_backend_finds_the_flow(backend: str) -> None:
    made = queue.enqueue_flow(
        "dag", [{"name": "a"}, {"name": "b", "depends_on": ["a"]}], backend=backend
    )
    assert queue.cancel_flow(made["flow_id"]) == 2


def _node(job_id: str, flow_id: str, depends_on: tuple[str, ...] = ()) -> Any:
    from dataclasses import replace

    job = enqueueing.new_job(
        "dag",
        {},
        job_id=job_id,
    )
    return replace(job, flow_id=flow_id, blocked=bool(depends_on), depends_on=depends_on)


def test_a_flow_delivered_in_batches_waits_for_dependencies_not_stored_yet(
    backend: str, engine: Backend
) -> None:
    """The outbox relay delivers a big flow in pages: a dependant may land before one of its
    dependencies, or after a dependency already finished. Neither releases it early, and
    neither leaves it blocked for ever."""
    from django_blamequeue.core import ids

    flow_id, a, b, c = (ids.new_id() for _ in range(4))
    engine.enqueue_many([_node(a, flow_id), _node(c, flow_id, (a, b))])  # b not stored yet
    succeed(engine, claim_one(engine, "dag"))  # a is done; b is still missing
    assert queue.get_job(c, backend=backend).state == "blocked"  # type: ignore[union-attr]
    engine.enqueue_many([_node(b, flow_id)])
    finished = claim_one(engine, "dag")
    assert finished.job_id == b
    succeed(engine, finished)
    assert claim_one(engine, "dag").job_id == c


def test_a_dependant_stored_after_its_dependencies_finished_is_pending_at_once(
    backend: str, engine: Backend
) -> None:
    from django_blamequeue.core import ids

    flow_id, a, c = (ids.new_id() for _ in range(3))
    engine.enqueue_many([_node(a, flow_id)])
    succeed(engine, claim_one(engine, "dag"))
    engine.enqueue_many([_node(c, flow_id, (a,))])
    assert queue.get_job(c, backend=backend).state == "pending"  # type: ignore[union-attr]
    assert claim_one(engine, "dag").job_id == c
