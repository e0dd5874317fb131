"""Rate limit: ``rate_limit=(max, per_seconds)`` caps handler starts in any rolling
window."""

from __future__ import annotations

import threading
import time
from typing import Any

from django_blamequeue import queue
from django_blamequeue.testing import wait_until


def test_at_most_max_handlers_start_in_any_window(backend: str) -> None:
    """Start times are the jobs' ``started_at``, stamped by the engine when the worker leased
    each job to start it: exact, unlike stamps taken in slot threads under load."""
    ran: list[Any] = []

    def handler(job: Any, ctx: Any) -> None:
        ran.append(job.payload)

    ids = [e.job_id for e in queue.enqueue_many("limited", range(5), backend=backend)]
    queue.consume(
        "limited", handler, backend=backend, concurrency=4, rate_limit=(2, 1.0), poll_interval=0.05
    )
    assert wait_until(lambda: len(ran) == 5, 10)
    starts = sorted(queue.get_job(i, backend=backend).started_at for i in ids)  # type: ignore[union-attr, type-var]
    offsets = [round((s - starts[0]).total_seconds(), 3) for s in starts]
    print(f"\n[{backend}] start offsets (s): {offsets}")
    # any three consecutive starts span at least the window: never 3 in one second
    assert all((starts[i + 2] - starts[i]).total_seconds() >= 1.0 for i in range(3)), offsets
    # and the limit is a rate, not a serialisation: two start together at once
    assert offsets[1] < 0.5 and offsets[3] - offsets[2] < 0.5, offsets
    assert sorted(ran) == list(range(5))


def test_without_a_rate_limit_the_concurrency_is_the_only_cap(backend: str) -> None:
    starts: list[float] = []
    lock = threading.Lock()

    def handler(job: Any, ctx: Any) -> None:
        with lock:
            starts.append(time.monotonic())

    queue.enqueue_many("free", range(6), backend=backend)
    queue.consume("free", handler, backend=backend, concurrency=4, poll_interval=0.05)
    assert wait_until(lambda: len(starts) == 6, 10)
    assert max(starts) - min(starts) < 1.0
