"""SPEC §3 rate limit: ``rate_limit=(max, per_seconds)`` caps handler starts in any rolling
window."""

from __future__ import annotations

import threading
import time
from typing import Any

from django_blamequeue import queue
from django_blamequeue.testing import wait_until

# Starts are stamped inside the handler, a moment after the worker dispatched them; thread
# scheduling can shift two stamps against each other by a few milliseconds.
SCHEDULING_SLACK = 0.03


def test_at_most_max_handlers_start_in_any_window(backend: str) -> None:
    starts: list[float] = []
    lock = threading.Lock()

    def handler(job: Any, ctx: Any) -> None:
        with lock:
            starts.append(time.monotonic())

    queue.enqueue_many("limited", range(5), backend=backend)
    queue.consume(
        "limited", handler, backend=backend, concurrency=4, rate_limit=(2, 1.0), poll_interval=0.05
    )
    assert wait_until(lambda: len(starts) == 5, 10)
    starts.sort()
    offsets = [round(s - starts[0], 3) for s in starts]
    print(f"\n[{backend}] start offsets (s): {offsets}")
    # any three consecutive starts span at least the window: never 3 in one second
    assert all(starts[i + 2] - starts[i] >= 1.0 - SCHEDULING_SLACK for i in range(3)), offsets
    # and the limit is a rate, not a serialisation: two start together at once
    assert starts[1] - starts[0] < 0.5, offsets
    assert starts[3] - starts[2] < 0.5, offsets


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
