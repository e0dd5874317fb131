"""A worker never goes quiet for good: while its engine refuses every claim and ack, its
registry row says ``stalled`` once jobs are due for ``WORKER_STALLED_AFTER``, and when the
engine answers again the same worker claims and runs them, and says ``running`` again.

The outage is an engine whose claim verbs raise ``BACKEND_UNAVAILABLE`` (the seam the
worker's loop calls); everything else — the registry, the backlog the stall check reads, the
jobs — is the real backend. The process tests (tests/processes/test_outages.py) pause the real
servers instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.testing import wait_until
from django_blamequeue.worker import fleet

Q = "live"
POLL = 0.2


def refusing(verb: Callable[..., Any], down: threading.Event) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        if down.is_set():
            raise QueueError(ErrorCode.BACKEND_UNAVAILABLE, "the engine is down (test)")
        return verb(*args, **kwargs)

    return call


def state_of(backend: str, worker_id: str) -> str | None:
    """The worker's registry state; None until its first heartbeat registered it."""
    return next((w.state for w in queue.workers(backend=backend) if w.worker_id == worker_id), None)


def test_a_worker_whose_engine_refuses_everything_is_stalled_and_claims_again_when_it_answers(
    backend: str,
    configure: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configure(WORKER_STALLED_AFTER=0.5)
    engine = get_backend(backend)  # the instance the worker gets, under these settings
    monkeypatch.setattr(fleet, "HEARTBEAT", 0.1)
    down = threading.Event()
    down.set()
    for verb in ("claim", "apply_and_claim"):
        monkeypatch.setattr(engine, verb, refusing(getattr(engine, verb), down))
    ids = [j.job_id for j in queue.enqueue_many(Q, [{}] * 3, backend=backend)]
    ran: list[str] = []
    consumer = queue.consume(
        Q, lambda job, ctx: ran.append(ctx.job_id), backend=backend, poll_interval=POLL
    )
    try:
        me = consumer.registration.worker_id
        assert wait_until(lambda: state_of(backend, me) == "stalled", 15)
        assert ran == []
        down.clear()  # the engine is back
        back = time.monotonic()
        assert wait_until(lambda: sorted(ran) == sorted(ids), 15)
        claimed_after = time.monotonic() - back
        assert wait_until(lambda: state_of(backend, me) == "running", 15)
        print(f"\n  liveness[{backend}]: claimed again {claimed_after:.2f} s after the outage")
    finally:
        down.clear()
        consumer.cancel()
        assert consumer.join(10)
