"""Rolling deploys: a worker never dead-letters a job for lack of a handler.

It hands the job back without spending an attempt (for a worker that has the handler), its
burst mode exits when only such jobs are left, and a job no worker had a handler for during
``MISSING_HANDLER_TIMEOUT`` fails saying so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from django_blamequeue import queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.testing import wait_until

from .support import claim_one, later, row


def handed_back(engine: Backend, job_id: str) -> bool:
    r = row(engine, job_id)
    return r["state"] == "pending" and r["reason"] == "no_handler"


def test_a_job_without_a_handler_here_is_handed_back_without_spending_an_attempt(
    backend: str, engine: Backend
) -> None:
    """``runworker`` dispatches by name; a name it does not know (new code enqueued it) goes
    back to pending, its attempts untouched, for a worker that knows it."""
    job_id = queue.enqueue("deploy", {"v": 2}, max_attempts=1, backend=backend).job_id
    consumer = queue.consume("deploy", None, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: handed_back(engine, job_id), 10)
    r = row(engine, job_id)
    assert r["attempts"] == 0 and "no handler for job name 'deploy'" in r["error"]
    assert r["available_at"] > engine.now()  # offered again later, not at once
    assert consumer.no_handler == {"deploy": 1}
    waits = engine.handler_waits(["deploy"])
    assert [(w.queue, w.name, w.count) for w in waits] == [("deploy", "deploy", 1)]


@pytest.mark.requires("supports_time_travel")
def test_a_handed_back_job_runs_once_a_worker_with_its_handler_takes_it(
    backend: str, engine: Backend, register: Callable[..., Any]
) -> None:
    job_id = queue.enqueue("deploy", {}, backend=backend).job_id
    consumer = queue.consume("deploy", None, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: handed_back(engine, job_id), 10)
    consumer.cancel()
    assert consumer.join(10)
    c = claim_one(engine, "deploy", now=later(engine, 400))
    assert (c.job_id, c.attempt) == (job_id, 1)


def test_burst_exits_when_only_jobs_without_a_handler_are_left(
    backend: str, engine: Backend, register: Callable[..., Any]
) -> None:
    done: list[Any] = []
    known = register(lambda p: done.append(p), queue="deploy")
    known.enqueue(1, backend=backend)
    unknown = queue.enqueue("deploy", {}, backend=backend).job_id
    consumer = queue.consume("deploy", None, backend=backend, poll_interval=0.05, burst=True)
    assert consumer.join(20), "burst mode waited for a job it cannot run"
    assert done == [1]
    assert handed_back(engine, unknown)


def test_a_job_no_worker_had_a_handler_for_too_long_fails_saying_so(
    backend: str, engine: Backend, configure: Callable[..., None]
) -> None:
    configure(MISSING_HANDLER_TIMEOUT=0.001)
    job_id = queue.enqueue("deploy", {}, backend=backend).job_id
    queue.consume("deploy", None, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: row(engine, job_id)["state"] == "failed", 10)
    r = row(engine, job_id)
    assert (r["reason"], r["attempts"]) == ("no_handler", 1)
    assert "no worker has a handler for job name 'deploy'" in r["error"]
    assert "MISSING_HANDLER_TIMEOUT" in r["error"]


def test_a_flow_parent_whose_flow_is_gone_is_handed_back_too(backend: str, engine: Backend) -> None:
    from django_blamequeue import Child, flow
    from django_blamequeue.jobs import registry

    @flow(queue="deploy", name="tests.conformance.GoneFlow")
    class GoneFlow:
        def fan_out(self, payload: Any) -> list[Child]:
            return []

        def collect(self, payload: Any, state: Any) -> None:
            return None

    parent = GoneFlow.enqueue({}, backend=backend).job_id  # type: ignore[attr-defined]
    registry.unregister("tests.conformance.GoneFlow")  # this worker's code has no such flow
    queue.consume("deploy", None, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: handed_back(engine, parent), 10)
    assert row(engine, parent)["attempts"] == 0
