"""Dead-letter queue: failed jobs are listed, counted and retried with a fresh
attempt budget."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from django_blamequeue import ErrorCode, JobInfo, QueueError, queue
from django_blamequeue.audit import DLQ_RETRY
from django_blamequeue.backends.base import Backend
from django_blamequeue.testing import capture_events, wait_until

from .support import claim_one, fail, row, succeed, to_dlq


def test_dlq_list_and_size_show_only_failed_jobs_of_the_queue(
    backend: str, engine: Backend
) -> None:
    failed = [to_dlq(engine, "dlq", {"n": i}) for i in range(3)]
    to_dlq(engine, "other")
    queue.enqueue("dlq", {"pending": True}, backend=backend)
    succeed(engine, claim_one(engine, "dlq"))  # a done job
    assert queue.dlq_size("dlq", backend=backend) == 3
    listed = queue.dlq_list("dlq", backend=backend)
    assert all(isinstance(j, JobInfo) for j in listed)
    assert [j.job_id for j in listed] == failed
    assert [j.payload for j in listed] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert all(j.state == "failed" and j.error == "RuntimeError: handler failed" for j in listed)


def test_dlq_list_pages_with_limit_and_offset(backend: str, engine: Backend) -> None:
    failed = [to_dlq(engine, "dlq") for _ in range(5)]
    assert [j.job_id for j in queue.dlq_list("dlq", limit=2, backend=backend)] == failed[:2]
    assert [j.job_id for j in queue.dlq_list("dlq", limit=2, offset=2, backend=backend)] == failed[
        2:4
    ]
    assert [j.job_id for j in queue.dlq_list("dlq", limit=10, offset=4, backend=backend)] == failed[
        4:
    ]


def test_dlq_retry_puts_the_job_back_with_a_fresh_budget(backend: str, engine: Backend) -> None:
    job_id = to_dlq(engine, "dlq")
    with capture_events() as events:
        assert queue.dlq_retry(job_id, backend=backend) is True
    r = row(engine, job_id)
    assert (r["state"], r["attempts"], r["stalls"], r["finished_at"]) == ("pending", 0, 0, None)
    assert [(e.action, e.job_id) for e in events.events] == [(DLQ_RETRY, job_id)]
    assert queue.dlq_size("dlq", backend=backend) == 0


def test_dlq_retry_of_a_job_not_in_the_dlq_answers_false(backend: str, engine: Backend) -> None:
    pending = queue.enqueue("dlq", {}, backend=backend).job_id
    before = row(engine, pending)
    assert queue.dlq_retry(pending, backend=backend) is False
    assert row(engine, pending) == before
    assert queue.dlq_retry("01ZZZZZZZZZZZZZZZZZZZZZZZZ", backend=backend) is False


def test_dlq_retry_all_retries_every_failed_job_of_the_queue(backend: str, engine: Backend) -> None:
    mine = [to_dlq(engine, "dlq") for _ in range(3)]
    other = to_dlq(engine, "other")
    assert queue.dlq_retry_all("dlq", backend=backend) == 3
    assert [row(engine, j)["state"] for j in mine] == ["pending"] * 3
    assert row(engine, other)["state"] == "failed"
    assert queue.dlq_retry_all("dlq", backend=backend) == 0


def test_a_retried_job_runs_again_with_a_fresh_attempt_budget(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(BACKOFF_BASE=0.01, BACKOFF_MAX=0.01)
    runs: list[tuple[int, int]] = []
    healthy = {"now": False}

    def sometimes_broken(payload: Any) -> str:
        from django_blamequeue import current_job

        ctx = current_job()
        runs.append((ctx.attempt, ctx.max_attempts))
        if not healthy["now"] or ctx.attempt == 1:
            raise ConnectionError("down")
        return "recovered"

    definition = register(sometimes_broken, max_attempts=2)
    job_id = definition.enqueue({}, backend=backend).job_id
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: row(engine, job_id)["state"] == "failed", 10)
    assert runs == [(1, 2), (2, 2)]
    healthy["now"] = True
    assert queue.dlq_retry(job_id, backend=backend)
    assert wait_until(lambda: row(engine, job_id)["state"] == "done", 10)
    # attempt 1 of a fresh budget failed and was retried, instead of going straight back
    assert runs == [(1, 2), (2, 2), (1, 2), (2, 2)]
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and (info.attempts, info.result) == (2, "recovered")


def test_a_retried_job_that_fails_again_is_back_in_the_dlq(backend: str, engine: Backend) -> None:
    job_id = to_dlq(engine, "dlq")
    assert queue.dlq_retry(job_id, backend=backend)
    c = claim_one(engine, "dlq")
    assert (c.job_id, c.attempt) == (job_id, 1)
    assert fail(engine, c).state == "failed"
    assert queue.dlq_size("dlq", backend=backend) == 1


@pytest.mark.parametrize(
    ("limit", "offset"), [(0, 0), (-1, 0), (10, -1), (1.5, 0), ("10", 0), (10, None)]
)
def test_dlq_list_refuses_a_bad_page(
    backend: str, engine: Backend, limit: Any, offset: Any
) -> None:
    to_dlq(engine, "dlq")
    with pytest.raises(QueueError) as caught:
        queue.dlq_list("dlq", limit=limit, offset=offset, backend=backend)
    assert caught.value.code == ErrorCode.BAD_ARGUMENT
