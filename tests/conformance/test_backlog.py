"""``Backend.backlog``: what a burst worker waits for (due work) apart from what it leaves
(delayed jobs, and when the first of them is due), by the engine's clock."""

from __future__ import annotations

from django_blamequeue import queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.core.records import Backlog

from .support import claim_one, succeed


def test_due_and_running_jobs_count_as_due_and_delayed_ones_apart(
    backend: str, engine: Backend
) -> None:
    queue.enqueue("bl", {"n": 1}, backend=backend)
    queue.enqueue("bl", {"n": 2}, backend=backend)
    queue.enqueue("bl", {"n": 3}, delay=600, backend=backend)
    queue.enqueue("bl", {"n": 4}, delay=60, backend=backend)
    queue.enqueue("elsewhere", {}, backend=backend)
    claim_one(engine, "bl")  # in flight: still work to wait for
    start = engine.now()
    left = engine.backlog(["bl"])
    assert (left.due, left.delayed) == (2, 2)
    assert left.next_due_at is not None
    assert 50 <= (left.next_due_at - start).total_seconds() <= 61
    assert engine.outstanding(["bl"]) == 4
    assert engine.backlog(["bl", "elsewhere"]).due == 3


def test_a_drained_queue_has_no_backlog(backend: str, engine: Backend) -> None:
    queue.enqueue("bl", {}, backend=backend)
    assert succeed(engine, claim_one(engine, "bl")).state == "done"
    assert engine.backlog(["bl"]) == Backlog()
    assert engine.backlog(["never-used"]) == Backlog()
    assert engine.outstanding(["bl"]) == 0
