"""Dedupe: at most one non-terminal job per (queue, dedupe_key); enqueue answers the
existing job marked ``deduplicated``."""

from __future__ import annotations

import threading

from django.db import connections

from django_blamequeue import EnqueuedJob, queue
from django_blamequeue.backends.base import Backend

from .support import claim_one, fail, jobs_in, succeed


def test_a_second_enqueue_with_the_key_answers_the_existing_job(
    backend: str, engine: Backend
) -> None:
    first = queue.enqueue("d", {"n": 1}, dedupe_key="user-7", backend=backend)
    second = queue.enqueue("d", {"n": 2}, dedupe_key="user-7", backend=backend)
    assert (first.deduplicated, second.deduplicated) == (False, True)
    assert second.job_id == first.job_id
    assert jobs_in(engine, "d") == 1
    assert queue.get_job(first.job_id, backend=backend).payload == {"n": 1}  # type: ignore[union-attr]


def test_the_key_is_per_queue(backend: str, engine: Backend) -> None:
    a = queue.enqueue("d1", {}, dedupe_key="k", backend=backend)
    b = queue.enqueue("d2", {}, dedupe_key="k", backend=backend)
    assert a.job_id != b.job_id and not b.deduplicated


def test_a_running_job_still_holds_its_key(backend: str, engine: Backend) -> None:
    first = queue.enqueue("d", {}, dedupe_key="k", backend=backend)
    claim_one(engine, "d")
    again = queue.enqueue("d", {}, dedupe_key="k", backend=backend)
    assert (again.job_id, again.deduplicated) == (first.job_id, True)


def test_after_the_first_is_done_a_new_job_is_created(backend: str, engine: Backend) -> None:
    first = queue.enqueue("d", {}, dedupe_key="k", backend=backend)
    succeed(engine, claim_one(engine, "d"))
    second = queue.enqueue("d", {}, dedupe_key="k", backend=backend)
    assert second.job_id != first.job_id and not second.deduplicated
    assert jobs_in(engine, "d") == 2


def test_a_failed_or_cancelled_holder_frees_the_key(backend: str, engine: Backend) -> None:
    failed = queue.enqueue("d", {}, dedupe_key="k", max_attempts=1, backend=backend)
    fail(engine, claim_one(engine, "d"))
    retried = queue.enqueue("d", {}, dedupe_key="k", backend=backend)
    assert retried.job_id != failed.job_id and not retried.deduplicated
    assert queue.cancel(retried.job_id, backend=backend)
    third = queue.enqueue("d", {}, dedupe_key="k", backend=backend)
    assert third.job_id not in (failed.job_id, retried.job_id) and not third.deduplicated


def test_dedupe_inside_one_batch(backend: str, engine: Backend) -> None:
    got = queue.enqueue_many("d", [1, 2, 3], dedupe_keys=["a", "b", "a"], backend=backend)
    assert [g.deduplicated for g in got] == [False, False, True]
    assert got[2].job_id == got[0].job_id
    assert jobs_in(engine, "d") == 2


def test_fifty_threads_enqueueing_one_key_make_exactly_one_row(
    backend: str, engine: Backend
) -> None:
    n = 50
    barrier = threading.Barrier(n)
    answers: list[EnqueuedJob] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def enqueue(i: int) -> None:
        try:
            barrier.wait(10)
            got = queue.enqueue("d", {"thread": i}, dedupe_key="the-one", backend=backend)
            with lock:
                answers.append(got)
        except BaseException as exc:  # reported below
            with lock:
                errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=enqueue, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    rows = jobs_in(engine, "d")
    created = sum(not a.deduplicated for a in answers)
    print(
        f"\n[{backend}] {n} threads, one dedupe key: {rows} row(s), {created} created, "
        f"{len(answers) - created} deduplicated, {len(errors)} errors"
    )
    assert errors == []
    assert rows == 1
    assert created == 1 and len(answers) == n
    assert len({a.job_id for a in answers}) == 1
