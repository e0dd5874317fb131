"""A job's attempt history (``Backend.attempts``): each attempt kept with its worker, times,
outcome, error class, message and traceback, written with the ack or rescue that ended it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from django_blamequeue import queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.conf import get_settings
from django_blamequeue.core import lifecycle
from django_blamequeue.core.records import Ack, AttemptInfo, Claimed, Transition
from django_blamequeue.sweeper.rescuer import Rescuer

from .support import claim_one, later, outcome


class Boom(ValueError):
    pass


def acked(engine: Backend, c: Claimed, t: Transition, worker: str = "host-1:42:abc") -> None:
    (result,) = engine.apply_many(
        [Ack(job_id=c.job_id, token=c.token, transition=t, worker=worker)]
    )
    assert result.ok


def raised(c: Claimed, exc: BaseException) -> Transition:
    """The attempt raised ``exc``; a retry is due at once (SQS cannot move its clock)."""
    t = outcome(c, lifecycle.Raised(exc, f"Traceback (most recent call last):\n{exc!r}\n"))
    return replace(t, delay=0.0)


def history(job_id: str, backend: str) -> list[tuple[int, str, str | None]]:
    return [(a.attempt, a.outcome, a.error_type) for a in queue.attempts(job_id, backend=backend)]


def test_the_default_keeps_the_attempts_that_did_not_end_done() -> None:
    assert get_settings().attempt_history == "failures"


def test_a_failed_attempt_is_kept_with_its_worker_times_error_class_and_traceback(
    backend: str, engine: Backend
) -> None:
    job_id = queue.enqueue("hist", {}, max_attempts=2, backend=backend).job_id
    c = claim_one(engine, "hist")
    acked(engine, c, raised(c, Boom("card declined")), worker="web-1:4211:a1")
    (first,) = queue.attempts(job_id, backend=backend)
    assert isinstance(first, AttemptInfo)
    assert (first.seq, first.attempt, first.outcome, first.worker) == (
        1,
        1,
        "retried",
        "web-1:4211:a1",
    )
    assert first.error_type == f"{__name__}.Boom"
    assert first.error == "Boom: card declined"
    assert first.traceback is not None and "Boom('card declined')" in first.traceback
    assert first.reason == "error"
    assert first.started_at is not None and first.finished_at is not None
    assert first.started_at <= first.finished_at


def test_each_attempt_adds_to_the_history_until_the_dlq(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("hist", {}, max_attempts=2, backend=backend).job_id
    c = claim_one(engine, "hist")
    acked(engine, c, raised(c, Boom("first")))
    c = claim_one(engine, "hist")
    acked(engine, c, raised(c, KeyError("second")))
    assert history(job_id, backend) == [
        (1, "retried", f"{__name__}.Boom"),
        (2, "failed", "builtins.KeyError"),
    ]
    assert [a.error for a in queue.attempts(job_id, backend=backend)] == [
        "Boom: first",
        "KeyError: 'second'",
    ]


def test_a_done_attempt_is_kept_only_when_attempt_history_is_all(
    backend: str, engine: Backend, configure: Callable[..., None]
) -> None:
    first = queue.enqueue("hist", {}, backend=backend).job_id
    c = claim_one(engine, "hist")
    acked(engine, c, outcome(c, lifecycle.Succeeded(None)))
    assert queue.attempts(first, backend=backend) == []
    configure(ATTEMPT_HISTORY="all")
    second = queue.enqueue("hist", {}, backend=backend).job_id
    c = claim_one(engine, "hist")
    acked(engine, c, outcome(c, lifecycle.Succeeded(None)), worker="w-2")
    ((attempt, kind, worker),) = [
        (a.attempt, a.outcome, a.worker) for a in queue.attempts(second, backend=backend)
    ]
    assert (attempt, kind, worker) == (1, "done", "w-2")


def test_nothing_is_kept_when_attempt_history_is_off(
    backend: str, engine: Backend, configure: Callable[..., None]
) -> None:
    configure(ATTEMPT_HISTORY="off")
    job_id = queue.enqueue("hist", {}, max_attempts=1, backend=backend).job_id
    c = claim_one(engine, "hist")
    acked(engine, c, raised(c, Boom("x")))
    assert queue.attempts(job_id, backend=backend) == []


def test_a_released_attempt_is_no_attempt(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("hist", {}, backend=backend).job_id
    c = claim_one(engine, "hist")
    acked(engine, c, outcome(c, lifecycle.Released()))
    assert queue.attempts(job_id, backend=backend) == []


def test_a_stale_ack_adds_nothing_to_the_history(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("hist", {}, backend=backend).job_id
    c = claim_one(engine, "hist")
    (result,) = engine.apply_many(
        [Ack(job_id=c.job_id, token="0" * 32, transition=raised(c, Boom("late")))]
    )
    assert not result.ok
    assert queue.attempts(job_id, backend=backend) == []


def test_an_expired_lease_is_kept_as_a_stalled_attempt(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("hist", {}, max_attempts=3, backend=backend).job_id
    t = later(engine, 0)
    claim_one(engine, "hist", lease=30, now=t)
    Rescuer(engine, max_stalled=1).run_once(later(engine, 31, t))
    ((attempt, kind, reason, worker),) = [
        (a.attempt, a.outcome, a.reason, a.worker) for a in queue.attempts(job_id, backend=backend)
    ]
    assert (attempt, kind, reason, worker) == (1, "stalled", "stalled", None)


def test_the_history_goes_on_across_a_dlq_retry_numbering_attempts_afresh(
    backend: str, engine: Backend
) -> None:
    job_id = queue.enqueue("hist", {}, max_attempts=1, backend=backend).job_id
    c = claim_one(engine, "hist")
    acked(engine, c, raised(c, Boom("before")))
    assert queue.dlq_retry(job_id, backend=backend)
    c = claim_one(engine, "hist")
    acked(engine, c, raised(c, Boom("after")))
    found = queue.attempts(job_id, backend=backend)
    assert [(a.seq, a.attempt, a.outcome, a.error) for a in found] == [
        (1, 1, "failed", "Boom: before"),
        (2, 1, "failed", "Boom: after"),
    ]


def test_a_deleted_job_takes_its_history_with_it(backend: str, engine: Backend) -> None:
    job_id = queue.enqueue("hist", {}, max_attempts=1, backend=backend).job_id
    c = claim_one(engine, "hist")
    acked(engine, c, raised(c, Boom("x")))
    assert queue.delete_jobs([job_id], backend=backend) == 1
    assert engine.attempts(job_id) == []
    assert queue.attempts(job_id, backend=backend) == []
