"""jobs/waiting: ``EnqueuedJob.info()``, ``.wait()`` and ``.result()`` on the SQLite backend —
what each state answers, how the polling grows, and what a wait that gives up says. The
waiting module's clock is a stand-in: sleeps move it, so timeouts cost no time and a job can
be finished "while" the caller waits, on the test's own thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.base import Backend
from django_blamequeue.core import lifecycle
from django_blamequeue.core.records import EnqueuedJob, JobInfo
from django_blamequeue.core.validation import MAX_SECONDS
from django_blamequeue.exceptions import (
    ErrorCode,
    JobFailed,
    JobWasCancelled,
    QueueError,
    ResultTimeout,
)
from django_blamequeue.jobs import waiting
from django_blamequeue.serializers import encode
from tests.conformance.support import ack, claim_one, fail, outcome

pytestmark = pytest.mark.django_db

Q = "waiting"


class Clock:
    """``waiting``'s ``time``: ``sleep`` moves ``monotonic`` and may act (``on_sleep(n)``)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.on_sleep: Callable[[int], None] = lambda n: None

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds
        self.on_sleep(len(self.sleeps))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(waiting, "time", clock)
    return clock


@pytest.fixture
def engine() -> Backend:
    return get_backend("default")


def finish(engine: Backend, job: EnqueuedJob, result: Any = None) -> None:
    c = claim_one(engine, job.queue_name)
    assert c.job_id == job.job_id
    done = lifecycle.Succeeded(encode(result) if result is not None else None)
    assert ack(engine, c, outcome(c, done)).state == "done"


# -- info ------------------------------------------------------------------------------------
def test_info_answers_the_job_as_its_backend_has_it_now() -> None:
    job = queue.enqueue(Q, {"n": 1})
    info = job.info()
    assert info is not None
    assert (info.job_id, info.state, info.payload) == (job.job_id, "pending", {"n": 1})


def test_info_answers_none_for_a_job_the_backend_does_not_have() -> None:
    assert EnqueuedJob(job_id="0" * 26, queue_name=Q, backend="default").info() is None


# -- wait ------------------------------------------------------------------------------------
def test_a_job_that_has_ended_is_answered_without_waiting(engine: Backend, clock: Clock) -> None:
    job = queue.enqueue(Q)
    finish(engine, job)
    assert job.wait(timeout=5).state == "done"
    assert clock.sleeps == []


def test_the_poll_interval_doubles_from_50_ms_up_to_poll_until_the_job_ends(
    engine: Backend, clock: Clock
) -> None:
    job = queue.enqueue(Q)
    clock.on_sleep = lambda n: finish(engine, job) if n == 5 else None
    info = job.wait(timeout=60, poll=0.3)
    assert info.state == "done"
    assert clock.sleeps == [0.05, 0.1, 0.2, 0.3, 0.3]


def test_a_poll_under_50_ms_is_the_interval_from_the_start(engine: Backend, clock: Clock) -> None:
    job = queue.enqueue(Q)
    clock.on_sleep = lambda n: finish(engine, job) if n == 3 else None
    job.wait(timeout=60, poll=0.01)
    assert clock.sleeps == [0.01, 0.01, 0.01]


def test_without_a_timeout_wait_polls_until_the_end(engine: Backend, clock: Clock) -> None:
    job = queue.enqueue(Q)
    clock.on_sleep = lambda n: finish(engine, job) if n == 40 else None
    assert job.wait(poll=1.0).state == "done"
    assert clock.sleeps[-1] == 1.0


def test_a_pending_job_times_out_saying_it_waits_for_a_worker(clock: Clock) -> None:
    job = queue.enqueue(Q)
    with pytest.raises(ResultTimeout) as caught:
        job.wait(timeout=2, poll=0.5)
    exc = caught.value
    assert exc.code == ErrorCode.RESULT_TIMEOUT
    assert exc.state == "pending"
    assert isinstance(exc.info, JobInfo) and exc.info.job_id == job.job_id
    assert exc.message.startswith(
        f"job {job.job_id} ({Q}) is still pending after 2 s (waiting for a worker"
    )
    assert sum(clock.sleeps) == pytest.approx(2.0)  # the last sleep is cut to the time left


def test_a_delayed_job_times_out_saying_when_it_is_due(engine: Backend, clock: Clock) -> None:
    job = queue.enqueue(Q, delay=3600)
    with pytest.raises(ResultTimeout) as caught:
        job.wait(timeout=1)
    info = caught.value.info
    assert isinstance(info, JobInfo) and info.available_at is not None
    assert info.available_at > engine.now()
    due = f"{info.available_at:%Y-%m-%d %H:%M:%S}"
    assert caught.value.message.endswith(f"(waiting for a worker, due at {due} UTC)")


def test_a_running_job_times_out_saying_which_attempt_runs(engine: Backend, clock: Clock) -> None:
    job = queue.enqueue(Q, max_attempts=3)
    claim_one(engine, Q)
    with pytest.raises(ResultTimeout) as caught:
        job.wait(timeout=1)
    assert caught.value.state == "inflight"
    assert caught.value.message.endswith("is still inflight after 1 s (running, attempt 1/3)")


def test_a_job_never_seen_times_out_saying_its_enqueue_may_not_be_committed(clock: Clock) -> None:
    job = EnqueuedJob(job_id="0" * 26, queue_name=Q, backend="default")
    with pytest.raises(ResultTimeout) as caught:
        job.wait(timeout=1.5)
    assert (caught.value.state, caught.value.info) == (None, None)
    assert caught.value.message == (
        f"job {job.job_id} is not on backend 'default' after 1.5 s "
        "(its enqueue not committed or not relayed yet?)"
    )


def test_a_job_seen_and_then_gone_is_unknown_at_once(clock: Clock) -> None:
    job = queue.enqueue(Q)

    def pruned(n: int) -> None:
        queue.purge(Q)

    clock.on_sleep = pruned
    with pytest.raises(QueueError) as caught:
        job.wait(timeout=60)
    assert caught.value.code == ErrorCode.UNKNOWN_JOB
    assert "pruned after it finished?" in caught.value.message
    assert len(clock.sleeps) == 1


def test_an_unreachable_engine_is_polled_again_until_the_job_ends(
    engine: Backend, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = queue.enqueue(Q)
    real = engine.get
    polls: list[str] = []

    def flaky(job_id: str) -> JobInfo | None:
        polls.append("poll")
        if len(polls) in (2, 3):
            raise QueueError(ErrorCode.BACKEND_UNAVAILABLE, "engine down")
        return real(job_id)

    monkeypatch.setattr(engine, "get", flaky)
    clock.on_sleep = lambda n: finish(engine, job, "ok") if n == 3 else None
    assert job.result(timeout=60) == "ok"
    assert len(polls) == 4


def test_a_wait_that_ends_while_the_engine_is_unreachable_names_the_last_state_seen(
    engine: Backend, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = queue.enqueue(Q)
    real = engine.get
    polls: list[str] = []

    def down_after_first(job_id: str) -> JobInfo | None:
        polls.append("poll")
        if len(polls) > 1:
            raise QueueError(ErrorCode.BACKEND_UNAVAILABLE, "engine down")
        return real(job_id)

    monkeypatch.setattr(engine, "get", down_after_first)
    with pytest.raises(ResultTimeout) as caught:
        job.wait(timeout=1)
    assert caught.value.state == "pending" and len(polls) > 2


def test_any_other_refusal_of_the_engine_is_raised_at_once(
    engine: Backend, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = queue.enqueue(Q)

    def refused(job_id: str) -> JobInfo | None:
        raise QueueError(ErrorCode.CONTENT_DISALLOWED, "cannot decode it")

    monkeypatch.setattr(engine, "get", refused)
    with pytest.raises(QueueError) as caught:
        job.wait(timeout=60)
    assert caught.value.code == ErrorCode.CONTENT_DISALLOWED and clock.sleeps == []


@pytest.mark.parametrize(
    ("timeout", "poll"),
    [
        (0, 1.0),
        (-1, 1.0),
        (True, 1.0),
        ("5", 1.0),
        (float("nan"), 1.0),
        (MAX_SECONDS + 1, 1.0),
        (5, None),
        (5, 0),
        (5, False),
    ],
)
def test_timeout_and_poll_must_be_seconds_above_zero(timeout: Any, poll: Any) -> None:
    job = queue.enqueue(Q)
    with pytest.raises(QueueError) as caught:
        job.wait(timeout=timeout, poll=poll)
    assert caught.value.code == ErrorCode.BAD_ARGUMENT


# -- result ----------------------------------------------------------------------------------
def test_result_answers_what_the_handler_returned(engine: Backend, clock: Clock) -> None:
    job = queue.enqueue(Q)
    finish(engine, job, {"total": 42})
    assert job.result(timeout=1) == {"total": 42}


def test_result_of_a_job_in_the_dlq_raises_job_failed_with_its_last_snapshot(
    engine: Backend, clock: Clock
) -> None:
    job = queue.enqueue(Q, max_attempts=1)
    fail(engine, claim_one(engine, Q), ValueError("the API said no"))
    with pytest.raises(JobFailed) as caught:
        job.result(timeout=1)
    exc = caught.value
    assert exc.code == ErrorCode.JOB_FAILED
    assert isinstance(exc.info, JobInfo) and exc.info.state == "failed"
    assert exc.message.startswith(f"job {job.job_id} ({Q}) failed after 1/1 attempt(s) (")
    assert exc.message.endswith("): ValueError: the API said no")


def test_result_of_a_cancelled_job_raises_job_was_cancelled(clock: Clock) -> None:
    job = queue.enqueue(Q)
    assert queue.cancel(job.job_id)
    with pytest.raises(JobWasCancelled) as caught:
        job.result(timeout=1)
    assert caught.value.code == ErrorCode.JOB_CANCELLED
    assert caught.value.message == f"job {job.job_id} ({Q}) was cancelled: it has no result"
    assert isinstance(caught.value.info, JobInfo) and caught.value.info.state == "cancelled"
