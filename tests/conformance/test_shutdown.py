"""Shutdown: stop leasing; let running handlers finish within the grace period;
release the rest, giving their attempt back."""

from __future__ import annotations

import threading
import time
from typing import Any

from django_blamequeue import queue
from django_blamequeue.audit import RELEASE
from django_blamequeue.backends.base import Backend
from django_blamequeue.exceptions import WorkerShutdown
from django_blamequeue.testing import capture_events, wait_until

from .support import claim_one, row


def test_a_graceful_release_gives_the_attempt_back(backend: str, engine: Backend) -> None:
    running = threading.Event()
    saw: list[type[BaseException]] = []

    def handler(job: Any, ctx: Any) -> None:
        running.set()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                time.sleep(0.01)
        except BaseException as exc:
            saw.append(type(exc))
            raise

    job_id = queue.enqueue("stop", {}, max_attempts=1, backend=backend).job_id
    consumer = queue.consume("stop", handler, backend=backend, poll_interval=0.05)
    assert running.wait(10)
    assert row(engine, job_id)["attempts"] == 1
    with capture_events() as events:
        consumer.cancel(grace=0.2)
        assert consumer.join(10)
    r = row(engine, job_id)
    assert (r["state"], r["attempts"], r["lease_expires_at"]) == ("pending", 0, None)
    assert [(e.action, e.job_id) for e in events.events] == [(RELEASE, job_id)]
    assert wait_until(lambda: bool(saw), 5)  # the interrupt lands after the release is acked
    assert saw == [WorkerShutdown]
    again = claim_one(engine, "stop")
    assert (again.job_id, again.attempt) == (job_id, 1)  # its only attempt is still there


def test_cancel_with_grace_lets_a_short_handler_finish(backend: str, engine: Backend) -> None:
    running = threading.Event()

    def handler(job: Any, ctx: Any) -> str:
        running.set()
        time.sleep(0.3)  # the work, shorter than the grace period
        return "finished"

    job_id = queue.enqueue("stop", {}, backend=backend).job_id
    consumer = queue.consume("stop", handler, backend=backend, poll_interval=0.05)
    assert running.wait(10)
    consumer.cancel(grace=10)
    assert consumer.join(10)
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and (info.state, info.attempts, info.result) == ("done", 1, "finished")


def test_a_stopping_consumer_leases_nothing_more(backend: str, engine: Backend) -> None:
    running = threading.Event()
    may_finish = threading.Event()
    ran: list[Any] = []

    def handler(job: Any, ctx: Any) -> None:
        ran.append(job.payload)
        running.set()
        may_finish.wait(10)

    queue.enqueue("stop", "first", backend=backend)
    consumer = queue.consume("stop", handler, backend=backend, concurrency=2, poll_interval=0.05)
    assert running.wait(10)
    consumer.cancel(grace=10)
    later_id = queue.enqueue("stop", "second", backend=backend).job_id
    may_finish.set()
    assert consumer.join(10)
    assert ran == ["first"]
    assert row(engine, later_id)["state"] == "pending"


def test_queue_shutdown_stops_every_consumer(backend: str) -> None:
    consumers = [
        queue.consume(f"stop-{i}", lambda job, ctx: None, backend=backend, poll_interval=0.05)
        for i in range(3)
    ]
    assert all(c.alive for c in consumers)
    queue.shutdown(timeout=10)
    assert not any(c.alive for c in consumers)
