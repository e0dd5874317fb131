"""Worker registry: every consumer registers, heartbeats the jobs it runs, says when
it stops; one that died is shown as gone after missing heartbeats, and later pruned."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from django_blamequeue import WorkerInfo, queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.models import WorkerRecord
from django_blamequeue.testing import wait_until
from django_blamequeue.worker import fleet


@pytest.fixture(autouse=True)
def quick_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet, "HEARTBEAT", 0.1)


def mine(backend: str) -> list[WorkerInfo]:
    return queue.workers(backend=backend)


def test_a_worker_registers_heartbeats_what_it_runs_and_says_when_it_stops(
    backend: str, engine: Backend
) -> None:
    release = threading.Event()

    def handler(job: Any, ctx: Any) -> None:
        release.wait(20)

    job_id = queue.enqueue("reg", {}, backend=backend).job_id
    consumer = queue.consume(
        ["reg", "other"], handler, backend=backend, concurrency=3, poll_interval=0.05
    )
    assert wait_until(lambda: [w.running for w in mine(backend)] == [(job_id,)], 10)
    (w,) = mine(backend)
    assert (w.state, w.queues, w.concurrency, w.backend) == (
        "running",
        ("reg", "other"),
        3,
        backend,
    )
    assert w.pid > 0 and w.host and w.worker_id == consumer.registration.worker_id
    assert w.job_names == ("*",)  # a handler of its own: it runs every name
    assert w.started_at <= w.last_seen
    release.set()
    assert wait_until(lambda: mine(backend)[0].running == () and mine(backend)[0].done == 1, 10)
    consumer.cancel()
    assert consumer.join(10)
    (w,) = mine(backend)
    assert (w.state, w.running) == ("stopped", ())
    assert w.stopped_at is not None


def test_a_worker_whose_heartbeats_stopped_is_gone_and_later_pruned(
    backend: str, engine: Backend
) -> None:
    consumer = queue.consume("reg", lambda job, ctx: None, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: len(mine(backend)) == 1, 10)
    consumer.cancel()
    assert consumer.join(10)
    b = engine
    seen = mine(backend)[0].last_seen
    running = WorkerRecord.objects.using(fleet.database_of(b))
    running.update(state="running", stopped_at=None)  # as if it had been SIGKILLed
    assert [w.state for w in fleet.workers(b, now=seen + timedelta(seconds=5))] == ["running"]
    assert [w.state for w in fleet.workers(b, now=seen + timedelta(seconds=60))] == ["gone"]
    assert fleet.prune(b, now=seen + timedelta(hours=1)) == 0
    assert fleet.prune(b, now=seen + timedelta(days=2)) == 1
    assert mine(backend) == []


def test_a_runworker_lists_the_job_names_it_has_handlers_for(
    backend: str, engine: Backend, register: Any
) -> None:
    known = register(lambda p: None)
    consumer = queue.consume(known.queue, None, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: len(mine(backend)) == 1, 10)
    assert known.name in mine(backend)[0].job_names
    consumer.cancel()
    assert consumer.join(10)
