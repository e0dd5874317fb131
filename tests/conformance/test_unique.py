"""Unique jobs: a key held by the storage engine, a window, the states that hold it, and what
a conflict does (skip, replace, debounce, reject). docs/unique.md."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from django_blamequeue import ErrorCode, QueueError, Unique, queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.jobs import enqueueing

from .support import claim_one, in_transaction, jobs_in, later, relay, succeed


def _enqueue_at(engine: Backend, when: Any, payload: Any, **options: Any) -> Any:
    """Enqueue through the backend's verb at a moved clock (``now``), as the facade would."""
    jobs = enqueueing.new_jobs(
        enqueueing.merged({"queue": "u", **options}, None), [payload], definition=None, name=None
    )
    (answer,) = engine.enqueue_many(jobs, now=when)
    return answer


def test_a_second_enqueue_of_a_held_key_answers_the_holder_and_is_counted(
    backend: str, engine: Backend
) -> None:
    first = queue.enqueue("u", {"user": 7}, unique=True, backend=backend)
    again = queue.enqueue("u", {"user": 7}, unique=True, backend=backend)
    other = queue.enqueue("u", {"user": 8}, unique=True, backend=backend)
    assert (first.deduplicated, first.conflict) == (False, None)
    assert (again.job_id, again.deduplicated, again.conflict) == (first.job_id, True, "skip")
    assert not other.deduplicated and other.job_id != first.job_id
    info = queue.get_job(first.job_id, backend=backend)
    assert info is not None and info.unique_calls == 1
    assert info.unique_key is not None and info.unique_key.startswith("u:")  # name: the queue's
    assert jobs_in(engine, "u") == 2


def test_the_key_is_free_once_the_holder_finishes_or_at_its_start_with_until_start(
    backend: str, engine: Backend
) -> None:
    first = queue.enqueue("u", {}, unique={"key": "k"}, backend=backend)
    claimed = claim_one(engine, "u")
    running = queue.enqueue("u", {}, unique={"key": "k"}, backend=backend)
    assert running.job_id == first.job_id  # until="finish": a running holder holds
    succeed(engine, claimed)
    second = queue.enqueue("u", {}, unique={"key": "k"}, backend=backend)
    assert not second.deduplicated and second.job_id != first.job_id

    start = Unique(key="s", until="start")
    third = queue.enqueue("u", {}, unique=start, backend=backend)
    assert claim_one(engine, "u").job_id in (second.job_id, third.job_id)
    assert claim_one(engine, "u").job_id in (second.job_id, third.job_id)
    fourth = queue.enqueue("u", {}, unique=start, backend=backend)
    assert not fourth.deduplicated  # the holder started: the key was given up


def test_a_window_holds_the_key_after_the_job_is_done_until_it_ends(
    backend: str, engine: Backend
) -> None:
    t0 = engine.now()
    spec = Unique(key="report", window=3600)
    first = _enqueue_at(engine, t0, {"n": 1}, unique=spec)
    succeed(engine, claim_one(engine, "u"))
    inside = _enqueue_at(engine, t0 + timedelta(seconds=1800), {"n": 2}, unique=spec)
    assert (inside.job_id, inside.conflict) == (first.job_id, "skip")
    after = _enqueue_at(engine, later(engine, 3601, t0), {"n": 3}, unique=spec)
    assert not after.deduplicated and after.job_id != first.job_id
    assert queue.get_job(first.job_id, backend=backend).unique_calls == 1  # type: ignore[union-attr]


def test_replace_gives_the_waiting_holder_the_new_payload_but_not_a_running_one(
    backend: str, engine: Backend
) -> None:
    spec = Unique(key="sync", on_conflict="replace", states=("waiting", "running"))
    first = queue.enqueue("u", {"v": 1}, unique=spec, backend=backend)
    again = queue.enqueue("u", {"v": 2}, unique=spec, backend=backend)
    assert (again.job_id, again.conflict) == (first.job_id, "replace")
    claimed = claim_one(engine, "u")
    from django_blamequeue.serializers import decode

    assert decode(*_triple(claimed.payload)) == {"v": 2}
    during = queue.enqueue("u", {"v": 3}, unique=spec, backend=backend)
    assert (during.job_id, during.conflict) == (first.job_id, "skip")  # it runs the args it has
    info = queue.get_job(first.job_id, backend=backend)
    assert info is not None and info.payload == {"v": 2} and info.unique_calls == 2


def test_debounce_delays_the_job_and_each_call_pushes_it_the_last_payload_runs(
    backend: str, engine: Backend
) -> None:
    spec = Unique(key="search-index", on_conflict="debounce", window=60)
    first = queue.enqueue("u", {"v": 1}, unique=spec, backend=backend)
    start = queue.get_job(first.job_id, backend=backend).available_at  # type: ignore[union-attr]
    assert engine.claim(["u"], 1, 30) == []  # not before the quiet time
    calls = [queue.enqueue("u", {"v": v}, unique=spec, backend=backend) for v in (2, 3)]
    assert {(c.job_id, c.conflict) for c in calls} == {(first.job_id, "debounce")}
    info = queue.get_job(first.job_id, backend=backend)
    assert info is not None and info.payload == {"v": 3} and info.available_at > start
    assert jobs_in(engine, "u") == 1


def test_reject_raises_duplicate_and_writes_nothing_even_in_a_batch(
    backend: str, engine: Backend
) -> None:
    spec = Unique(key="once", on_conflict="reject")
    first = queue.enqueue("u", {}, unique=spec, backend=backend)
    with pytest.raises(QueueError) as held:
        queue.enqueue("u", {}, unique=spec, backend=backend)
    assert held.value.code == ErrorCode.DUPLICATE and first.job_id in held.value.message
    batch = Unique(key=lambda p: p["k"], on_conflict="reject")
    with pytest.raises(QueueError) as err:
        queue.enqueue_many(
            "u", [{"k": "a"}, {"k": "b"}, {"k": "once"}], unique=batch, backend=backend
        )
    assert err.value.code == ErrorCode.DUPLICATE
    with pytest.raises(QueueError):
        queue.enqueue_many("u", [{"k": "c"}, {"k": "c"}], unique=batch, backend=backend)
    assert jobs_in(engine, "u") == 1
    assert queue.get_job(first.job_id, backend=backend).unique_calls == 0  # type: ignore[union-attr]


def test_a_batch_folds_its_calls_of_one_key_and_per_queue_keys_are_apart(
    backend: str, engine: Backend
) -> None:
    spec = Unique(key=lambda p: p["k"], on_conflict="replace")
    got = queue.enqueue_many(
        "u", [{"k": "a", "v": 1}, {"k": "b"}, {"k": "a", "v": 2}], unique=spec, backend=backend
    )
    assert [g.deduplicated for g in got] == [False, False, True]
    assert got[2].job_id == got[0].job_id
    assert queue.get_job(got[0].job_id, backend=backend).payload == {"k": "a", "v": 2}  # type: ignore[union-attr]
    mine = Unique(key="k", per_queue=True)
    a = queue.enqueue("u1", {}, unique=mine, backend=backend)
    b = queue.enqueue("u2", {}, unique=mine, backend=backend)
    assert not b.deduplicated and a.job_id != b.job_id
    shared = [queue.enqueue(q, {}, unique={"key": "g"}, backend=backend) for q in ("u1", "u2")]
    assert shared[1].job_id == shared[0].job_id


def test_a_rolled_back_enqueue_frees_the_key_a_committed_one_holds_it(
    backend: str, engine: Backend
) -> None:
    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), in_transaction(engine):
        queue.enqueue("u", {}, unique={"key": "tx"}, backend=backend)
        raise Rollback
    relay(engine)
    assert jobs_in(engine, "u") == 0
    with in_transaction(engine):
        first = queue.enqueue("u", {}, unique={"key": "tx"}, backend=backend)
    relay(engine)
    again = queue.enqueue("u", {}, unique={"key": "tx"}, backend=backend)
    assert (again.job_id, again.deduplicated) == (first.job_id, True)
    assert jobs_in(engine, "u") == 1


def test_a_reject_in_a_transaction_raises_at_once_or_once_delivered_is_a_logged_skip(
    backend: str, engine: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    spec = Unique(key="late", on_conflict="reject")
    first = queue.enqueue("u", {}, unique=spec, backend=backend)
    with in_transaction(engine):
        if engine.transactional_enqueue:  # the engine joins the transaction: it refuses now
            with pytest.raises(QueueError) as err:
                queue.enqueue("u", {}, unique=spec, backend=backend)
            assert err.value.code == ErrorCode.DUPLICATE
        else:  # the outbox delivers it after the commit: nobody is left to raise to
            queue.enqueue("u", {}, unique=spec, backend=backend)
    with caplog.at_level("WARNING", logger="django_blamequeue"):
        relay(engine)
    assert jobs_in(engine, "u") == 1
    warned = f"unique key 'late' is held by job {first.job_id}"
    assert (warned in caplog.text) == (not engine.transactional_enqueue)


def _triple(payload: Any) -> tuple[str, str, bytes]:
    return payload.content_type, payload.content_encoding, payload.body
