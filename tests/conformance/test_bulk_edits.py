"""Operators' bulk edits (``queue.delete_jobs``, ``move_jobs``, ``set_priority``,
``dlq_retry_many``): what each touches, what it leaves alone, and its audit."""

from __future__ import annotations

import pytest

from django_blamequeue import ErrorCode, QueueError, queue
from django_blamequeue.audit import DELETE, MOVE, PRIORITY
from django_blamequeue.backends.base import Backend
from django_blamequeue.testing import capture_events

from .support import claim_one, jobs_in, nothing_written, row, succeed, to_dlq


def states(backend: str, *ids: str) -> list[str | None]:
    infos = [queue.get_job(i, backend=backend) for i in ids]
    return [i.state if i is not None else None for i in infos]


def test_delete_removes_every_job_that_is_not_running(backend: str, engine: Backend) -> None:
    failed = to_dlq(engine, "bulk")
    queue.enqueue("bulk", {"n": "done"}, backend=backend)
    done = claim_one(engine, "bulk")
    succeed(engine, done)
    queue.enqueue("bulk", {"n": "running"}, backend=backend)
    running = claim_one(engine, "bulk")
    pending = queue.enqueue("bulk", {}, backend=backend).job_id
    delayed = queue.enqueue("bulk", {}, delay=3600, backend=backend).job_id
    ids = [pending, delayed, failed, done.job_id, running.job_id]
    with capture_events() as events:
        assert queue.delete_jobs(ids, backend=backend) == 4
    assert states(backend, *ids) == [None, None, None, None, "inflight"]
    assert engine.claim(["bulk"], 5, 30) == []
    assert sorted(e.job_id or "" for e in events.of(DELETE)) == sorted(ids[:4])
    assert queue.dlq_size("bulk", backend=backend) == 0
    assert jobs_in(engine, "bulk") == 1


def test_delete_of_unknown_ids_deletes_nothing(backend: str, engine: Backend) -> None:
    kept = queue.enqueue("bulk", {}, backend=backend).job_id
    assert queue.delete_jobs(["01ZZZZZZZZZZZZZZZZZZZZZZZZ"], backend=backend) == 0
    assert queue.delete_jobs([], backend=backend) == 0
    assert states(backend, kept) == ["pending"]


def test_a_moved_pending_job_is_claimed_from_its_new_queue_only(
    backend: str, engine: Backend
) -> None:
    job_id = queue.enqueue("from-q", {"n": 1}, backend=backend).job_id
    with capture_events() as events:
        assert queue.move_jobs([job_id], "to-q", backend=backend) == 1
    assert row(engine, job_id)["queue"] == "to-q"
    assert [(e.data["from"], e.data["to"]) for e in events.of(MOVE)] == [("from-q", "to-q")]
    assert engine.claim(["from-q"], 5, 30) == []
    c = claim_one(engine, "to-q")
    assert (c.job_id, c.queue) == (job_id, "to-q")


def test_a_moved_failed_job_is_in_the_dlq_of_its_new_queue(backend: str, engine: Backend) -> None:
    job_id = to_dlq(engine, "from-q")
    assert queue.move_jobs([job_id], "to-q", backend=backend) == 1
    assert queue.dlq_size("from-q", backend=backend) == 0
    assert [j.job_id for j in queue.dlq_list("to-q", backend=backend)] == [job_id]
    assert queue.dlq_retry(job_id, backend=backend)
    assert claim_one(engine, "to-q").job_id == job_id


def test_move_leaves_running_and_finished_jobs_where_they_are(
    backend: str, engine: Backend
) -> None:
    queue.enqueue("from-q", {"n": 1}, backend=backend)
    running = claim_one(engine, "from-q")
    queue.enqueue("from-q", {"n": 2}, backend=backend)
    done = claim_one(engine, "from-q")
    succeed(engine, done)
    assert queue.move_jobs([running.job_id, done.job_id], "to-q", backend=backend) == 0
    assert [row(engine, j)["queue"] for j in (running.job_id, done.job_id)] == ["from-q"] * 2


def test_a_waiting_job_stays_when_a_live_job_holds_its_dedupe_key_in_the_new_queue(
    backend: str, engine: Backend
) -> None:
    holder = queue.enqueue("to-q", {}, dedupe_key="k", backend=backend).job_id
    mover = queue.enqueue("from-q", {}, dedupe_key="k", backend=backend).job_id
    free = queue.enqueue("from-q", {}, backend=backend).job_id
    assert queue.move_jobs([mover, free], "to-q", backend=backend) == 1
    assert (row(engine, mover)["queue"], row(engine, free)["queue"]) == ("from-q", "to-q")
    assert states(backend, holder) == ["pending"]


def test_set_priority_changes_the_claim_order_of_waiting_jobs(
    backend: str, engine: Backend
) -> None:
    first = queue.enqueue("prio", {}, backend=backend).job_id
    second = queue.enqueue("prio", {}, backend=backend).job_id
    with capture_events() as events:
        assert queue.set_priority([second], 7, backend=backend) == 1
        assert queue.set_priority([second], 7, backend=backend) == 0  # no change: not counted
    assert (row(engine, first)["priority"], row(engine, second)["priority"]) == (0, 7)
    assert [(e.job_id, e.data["from"], e.data["to"]) for e in events.of(PRIORITY)] == [
        (second, 0, 7)
    ]
    if engine.supports_priority:
        assert claim_one(engine, "prio").job_id == second


def test_set_priority_leaves_running_jobs_alone(backend: str, engine: Backend) -> None:
    queue.enqueue("prio", {}, backend=backend)
    running = claim_one(engine, "prio")
    assert queue.set_priority([running.job_id], 9, backend=backend) == 0
    assert row(engine, running.job_id)["priority"] == 0


def test_dlq_retry_many_retries_the_failed_ones_only(backend: str, engine: Backend) -> None:
    failed = [to_dlq(engine, "bulk") for _ in range(3)]
    pending = queue.enqueue("bulk", {}, backend=backend).job_id
    assert queue.dlq_retry_many([*failed[:2], pending], backend=backend) == 2
    assert states(backend, *failed, pending) == ["pending", "pending", "failed", "pending"]


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda b: queue.move_jobs(["01ZZZZZZZZZZZZZZZZZZZZZZZZ"], "", backend=b), "MISSING_QUEUE"),
        (
            lambda b: queue.set_priority(["01ZZZZZZZZZZZZZZZZZZZZZZZZ"], True, backend=b),
            "BAD_ARGUMENT",
        ),
        (lambda b: queue.delete_jobs("01ZZZZZZZZZZZZZZZZZZZZZZZZ", backend=b), "BAD_ARGUMENT"),
        (lambda b: queue.delete_jobs([None], backend=b), "BAD_ARGUMENT"),
    ],
    ids=["empty queue name", "bool priority", "a string for the ids", "None as an id"],
)
def test_bad_arguments_are_refused_before_anything_changes(
    backend: str, engine: Backend, call: object, code: str
) -> None:
    with pytest.raises(QueueError) as raised:
        call(backend)  # type: ignore[operator]
    assert raised.value.code == ErrorCode[code]
    assert nothing_written(engine)
