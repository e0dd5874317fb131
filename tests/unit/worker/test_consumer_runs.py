"""The consumer's bookkeeping when a job it still holds a run of is leased to it again.

An outage longer than the lease does this: the worker's lease runs out while its run goes on
(or has finished, its outcome not yet reaped), the job is re-pended with a stall and the same
worker claims it again. Two runs of one job then live in one worker for a while. The old one
must end without touching the new one — it used to pop the new run from the running map,
leaving a run held back to run alone that nothing tracked, and a worker that never claimed
again. The rounds' steps are driven one by one here, on the real SQLite backend, with the
engine's clock moved instead of waited for.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.testing import wait_until
from django_blamequeue.worker.consumer import Consumer, WorkerOptions
from tests.conformance.support import claim_one, later

pytestmark = pytest.mark.django_db(transaction=True)

Q = "twice"


def test_a_run_whose_job_was_leased_here_again_ends_without_touching_the_new_run() -> None:
    engine = get_backend("default")
    release = threading.Event()
    calls: list[int] = []

    def handler(job: Any, ctx: Any) -> None:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            release.wait(10)

    job_id = queue.enqueue(Q, {}, backend="default").job_id
    options = WorkerOptions(queues=(Q,), concurrency=2, lease=5, register=False)
    consumer = Consumer(engine, options, handler)
    try:
        first = claim_one(engine, Q, lease=5)
        consumer._dispatch_all([first])
        assert wait_until(lambda: calls == [1])
        # The lease runs out (an outage); the job is re-pended with a stall and leased again
        # by this same worker, while its first run finishes.
        t = later(engine, 60)
        assert engine.rescue_expired(now=t, max_stalled=1).repended == 1
        second = claim_one(engine, Q, lease=5, now=t)
        assert (second.job_id, second.stalls) == (job_id, 1)  # on probation: it runs alone
        release.set()
        assert wait_until(lambda: len(consumer._finished) == 1)  # finished, not yet reaped
        consumer._dispatch_all([second])
        consumer._reap()  # the first run ends: no ack (its lease is gone), nothing else
        assert consumer._running[job_id].claimed.token == second.token
        assert consumer._probation.busy(consumer._running)  # the second waits to run alone
        consumer._start_alone()  # ... alone now: it starts
        assert wait_until(lambda: calls == [1, 2])
        assert wait_until(lambda: len(consumer._finished) == 1)
        consumer._reap()
        consumer._flush()
        assert engine.get(job_id).state == "done"  # type: ignore[union-attr]
        assert not consumer._probation.busy(consumer._running) and consumer._open_slots() == 2
        assert consumer.counters.lock_lost == 1 and consumer.counters.done == 1
    finally:
        release.set()
        consumer.pool.stop()
