"""Progress: ``ctx.progress(pct)`` is throttled to one write per 250 ms; 0 and 100 are
always recorded. Measured by the PROGRESS audit rows (``AUDIT = "all"``)."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pytest

from django_blamequeue import ErrorCode, QueueError, context, queue
from django_blamequeue.audit import PROGRESS
from django_blamequeue.backends.base import Backend
from django_blamequeue.conf import get_settings
from django_blamequeue.testing import wait_until

from .support import audit_rows, row


class Clock:
    """The monotonic clock ``JobContext`` reads, moved by the handler instead of sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(context, "time", types.SimpleNamespace(monotonic=c.monotonic))
    return c


def recorded(engine: Backend, job_id: str) -> list[int]:
    rows = audit_rows(engine).filter(action=PROGRESS, job_id=job_id).order_by("id")
    return [r.data["progress"] for r in rows]


def run(backend: str, steps: Callable[[Any], None]) -> str:
    failures: list[BaseException] = []

    def handler(job: Any, ctx: Any) -> None:
        try:
            steps(ctx)
        except BaseException as exc:
            failures.append(exc)
            raise

    job_id = queue.enqueue("progress", {}, backend=backend).job_id
    queue.consume("progress", handler, backend=backend, poll_interval=0.05)
    assert wait_until(
        lambda: queue.get_job(job_id, backend=backend).state in ("done", "failed"), 10
    )  # type: ignore[union-attr]
    assert failures == []
    return job_id


def test_the_throttle_is_250_ms_by_default() -> None:
    assert get_settings().progress_throttle == 0.25


def test_progress_is_throttled_to_one_write_per_250_ms(
    backend: str, engine: Backend, configure: Callable[..., None], clock: Clock
) -> None:
    configure(AUDIT="all")

    def steps(ctx: Any) -> None:
        ctx.progress(10)  # recorded: the first
        clock.now += 0.1
        ctx.progress(20)  # 100 ms later: dropped
        clock.now += 0.1
        ctx.progress(30)  # 200 ms: dropped
        clock.now += 0.06
        ctx.progress(40)  # 260 ms after the last write: recorded
        clock.now += 0.249
        ctx.progress(50)  # dropped
        clock.now += 0.001
        ctx.progress(60)  # exactly 250 ms: recorded

    job_id = run(backend, steps)
    assert recorded(engine, job_id) == [10, 40, 60]


def test_zero_and_one_hundred_are_always_recorded(
    backend: str, engine: Backend, configure: Callable[..., None], clock: Clock
) -> None:
    configure(AUDIT="all")

    def steps(ctx: Any) -> None:
        ctx.progress(0)
        for pct in range(1, 100):
            ctx.progress(pct)  # all within the same instant: dropped
        ctx.progress(100)
        ctx.progress(0)

    job_id = run(backend, steps)
    assert recorded(engine, job_id) == [0, 100, 0]


def test_progress_is_stored_on_the_job_while_it_runs(
    backend: str, engine: Backend, clock: Clock
) -> None:
    seen: list[int] = []

    def steps(ctx: Any) -> None:
        ctx.progress(42)
        seen.append(row(engine, ctx.job_id)["progress"])

    job_id = run(backend, steps)
    assert seen == [42]
    assert queue.get_job(job_id, backend=backend).progress == 100  # type: ignore[union-attr]


@pytest.mark.parametrize("pct", [-1, 101, 50.5 + 100, "50", None, True])
def test_progress_outside_0_to_100_is_refused(backend: str, pct: Any) -> None:
    def steps(ctx: Any) -> None:
        with pytest.raises(QueueError) as caught:
            ctx.progress(pct)
        assert caught.value.code == ErrorCode.BAD_ARGUMENT

    run(backend, steps)
