"""A job name's rate limit (``@job(rate_limit="2/m")``), held by the engine across workers
and queues (rule: limits), on every backend.

Claims are driven as a worker makes them: every queue it serves is claimed under the job
names' limits (``QueueLimits.name_rate_limits``). SQS leases among the messages it delivers
and hides the refused ones for ``LIMIT_HOLD``, so the helpers claim in a loop with a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from django_blamequeue import QueueLimits, queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.core.records import Claimed
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs import registry
from django_blamequeue.testing import capture_events

from .support import later

#: The job name limited in these tests: 2 starts a minute, as a worker passes it.
LIMITED = QueueLimits(name_rate_limits=(("tests.rated", 2, 60.0),))


@pytest.fixture(autouse=True)
def short_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """SQS hides a message its limits refuse for ``LIMIT_HOLD`` (2 s): 1 s here."""
    try:
        from django_blamequeue.backends.sqs import receive
    except ImportError:  # boto3 not installed: no SQS backend to hurry
        return
    monkeypatch.setattr(receive, "LIMIT_HOLD", 1)


@pytest.fixture
def rated(register: Callable[..., Any]) -> Any:
    return register(lambda n: n, name="tests.rated", rate_limit="2/m")


@pytest.fixture
def other(register: Callable[..., Any]) -> Any:
    return register(lambda n: n, name="tests.other")


def claims(
    engine: Backend,
    queues: list[str],
    *,
    want: int,
    now: datetime | None = None,
    limits: QueueLimits = LIMITED,
    timeout: float = 6.0,
) -> list[Claimed]:
    """Claim ``queues`` as a worker with the job names' limits does, until ``want`` jobs came
    back or the deadline passed (a deadline only SQS's held messages need)."""
    got: list[Claimed] = []
    deadline = time.monotonic() + (timeout if not engine.supports_time_travel else 0.5)
    while len(got) < want and time.monotonic() < deadline:
        got += engine.claim(queues, 10, 30, now=now, limits={q: limits for q in queues})
        if len(got) < want:
            time.sleep(0.1)
    return got


def names(claimed: list[Claimed]) -> list[str]:
    return sorted(c.name for c in claimed)


def test_a_job_name_s_limit_holds_across_claims_and_queues_and_frees_with_its_window(
    backend: str, engine: Backend, rated: Any
) -> None:
    rated.enqueue_many([1, 2, 3], queue="a", backend=backend)
    rated.enqueue_many([4, 5, 6], queue="b", backend=backend)
    start = engine.now()
    first = claims(engine, ["a", "b"], want=2, now=start)
    assert names(first) == ["tests.rated"] * 2  # two starts a minute, whatever the queue
    # past SQS's hold of the refused messages (LIMIT_HOLD): they were offered again
    assert claims(engine, ["a", "b"], want=1, now=later(engine, 30, start), timeout=2.5) == []
    again = claims(engine, ["a", "b"], want=2, now=later(engine, 61, start))
    assert names(again) == ["tests.rated"] * 2  # the window moved on: two more
    assert not {c.job_id for c in first} & {c.job_id for c in again}


def test_a_full_name_never_holds_up_the_other_jobs_of_its_queue(
    backend: str, engine: Backend, rated: Any, other: Any
) -> None:
    rated.enqueue_many(list(range(20)), queue="mixed", backend=backend)
    others = {j.job_id for j in other.enqueue_many([1, 2, 3], queue="mixed", backend=backend)}
    got = claims(engine, ["mixed"], want=5)
    assert names(got) == ["tests.other"] * 3 + ["tests.rated"] * 2
    assert others <= {c.job_id for c in got}


def test_live_queue_limits_leave_a_job_name_s_limit_in_force(
    backend: str, engine: Backend, rated: Any
) -> None:
    rated.enqueue_many(list(range(5)), queue="mail", backend=backend)
    queue.set_limits("mail", concurrency=10, backend=backend)
    assert names(claims(engine, ["mail"], want=2)) == ["tests.rated"] * 2
    assert claims(engine, ["mail"], want=1, timeout=2.5) == []


def test_a_worker_with_the_job_claims_under_its_limit(
    backend: str, engine: Backend, rated: Any
) -> None:
    """End to end: a worker passes the limits of the jobs it has; 2 of 5 run this minute."""
    handles = rated.enqueue_many(list(range(5)), backend=backend)
    with capture_events() as events:
        worker = queue.consume(rated.queue, None, backend=backend, poll_interval=0.05)
        try:
            assert events.wait_for_action("system.queue.consume.success", count=2, timeout=20)
            time.sleep(0.5)  # ten poll intervals: a third start would have happened by now
        finally:
            worker.cancel()
            worker.join(10)
    states = sorted(h.info().state for h in handles)  # type: ignore[union-attr]
    assert states == ["done", "done", "pending", "pending", "pending"]


@pytest.mark.parametrize("bad", ["ten/s", "10/d", "10", 0, -1, (1, 0), "0/m", True])
def test_a_bad_rate_limit_is_refused_at_registration(bad: Any) -> None:
    with pytest.raises(QueueError) as caught:
        registry.job(name="tests.bad_rate", rate_limit=bad)(lambda: None)
    assert caught.value.code == ErrorCode.BAD_RATE_LIMIT
    assert registry.get("tests.bad_rate") is None


@pytest.mark.parametrize(
    ("given", "expected"),
    [("10/s", (10, 1.0)), ("10/m", (10, 60.0)), ("3/h", (3, 3600.0)), (5, (5, 1.0))],
)
def test_a_rate_limit_reads_celery_s_spelling(given: Any, expected: tuple[int, float]) -> None:
    definition = registry.job(name="tests.spelled", rate_limit=given)(lambda: None)
    try:
        assert definition.options.rate_limit == expected
        assert ("tests.spelled", *expected) in registry.rate_limits()
    finally:
        registry.unregister("tests.spelled")
