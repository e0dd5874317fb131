"""Settle and cascade (docs/flows.md): "fail" settles at the first failure and
cancels the unfinished children — pending, blocked and in flight — "continue" waits for every
child, and cancelling the parent cascades the same way."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.core import ids, lifecycle
from django_blamequeue.core.records import Ack
from django_blamequeue.models import AuditEvent, Job, OutboxEntry
from django_blamequeue.testing import wait_until

from .conftest import CALLS, collects
from .steps import outcome_of, relay, run_to_end, work

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def db(alias: str) -> str:
    return get_backend(alias).db  # type: ignore[attr-defined, no-any-return]


def states(alias: str, parent_id: str) -> dict[str, str]:
    return dict(
        Job.objects.using(db(alias)).filter(parent_id=parent_id).values_list("flow_key", "state")
    )


def four_children() -> dict[str, Any]:
    """running (claimed first), failing (claimed second), waiting, blocked."""
    page = "tests.flows.page"
    return {
        "children": [
            {"key": "running", "job": page, "payload": {"page": 1}, "priority": 9},
            {"key": "failing", "job": page, "payload": {"page": 2, "fail": True}, "priority": 8},
            {"key": "waiting", "job": page, "payload": {"page": 3}},
            {"key": "blocked", "job": page, "payload": {"page": 4}},
        ]
    }


def fan_out_four(alias: str, flow: Any) -> tuple[str, Any]:
    parent = flow.enqueue(four_children(), backend=alias)
    work(alias, ["reports"])
    Job.objects.using(db(alias)).filter(id=ids.child_id(parent.job_id, "blocked")).update(
        state="blocked"
    )
    b = get_backend(alias)
    [running] = b.claim(["pages"], 1, 30)
    assert running.job_id == ids.child_id(parent.job_id, "running")
    work(alias, ["pages"], limit=1)  # "failing" fails
    return parent.job_id, running


def test_fail_settles_at_the_first_failure_and_cancels_pending_blocked_and_in_flight(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    b = get_backend(backend)
    parent_id, running = fan_out_four(backend, jobs.Report)
    assert states(backend, parent_id)["failing"] == "failed"
    assert queue.get_job(parent_id, backend=backend).state == "waiting_children"  # type: ignore[union-attr]

    relay()
    assert queue.get_job(parent_id, backend=backend).state == "pending"  # type: ignore[union-attr]
    assert states(backend, parent_id) == {
        "running": "inflight",
        "failing": "failed",
        "waiting": "cancelled",
        "blocked": "cancelled",
    }
    signals = b.lease_signals([(running.job_id, running.token)])
    assert signals.cancel_requested == {
        running.job_id
    }  # the worker interrupts it on its next heartbeat
    assert b.claim(["pages"], 10, 30) == []  # nothing of this flow runs any more

    cancelled = lifecycle.decide(
        lifecycle.Cancelled(), attempt=1, max_attempts=1, policy=lifecycle.Policy()
    )
    assert b.apply_many([Ack(job_id=running.job_id, token=running.token, transition=cancelled)])[
        0
    ].ok
    relay()
    run_to_end(backend, ["reports", "pages"])
    [state] = collects()  # collect ran once, after the first failure
    assert (state.failed, state.cancelled, state.pending, state.completed) == (1, 3, 0, 0)
    info = queue.get_job(parent_id, backend=backend)
    assert info is not None and info.state == "done"
    assert info.children == {"failed": 1, "cancelled": 3}  # the late reports are still recorded
    assert not OutboxEntry.objects.using(db(backend)).exists()
    assert CALLS["page"] == [2]


def test_continue_waits_for_every_child_after_a_failure(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    parent_id, running = fan_out_four(backend, jobs.Continue)
    relay()
    assert queue.get_job(parent_id, backend=backend).state == "waiting_children"  # type: ignore[union-attr]
    assert states(backend, parent_id)["waiting"] == "pending"
    b = get_backend(backend)
    b.apply_many([outcome_of(backend, running)])
    Job.objects.using(db(backend)).filter(id=ids.child_id(parent_id, "blocked")).update(
        state="pending"
    )
    work(backend, ["pages"], limit=1)
    relay()
    assert queue.get_job(parent_id, backend=backend).children == {
        "done": 2,
        "failed": 1,
        "pending": 1,
    }  # type: ignore[union-attr]
    assert collects() == []
    run_to_end(backend, ["reports", "pages"])
    [state] = collects()
    assert (state.completed, state.failed, state.cancelled, state.pending) == (3, 1, 0, 0)


def test_cancelling_the_parent_cascades_to_its_unfinished_children(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    b = get_backend(backend)
    parent = jobs.Continue.enqueue(four_children(), backend=backend)
    work(backend, ["reports"])
    Job.objects.using(db(backend)).filter(id=ids.child_id(parent.job_id, "blocked")).update(
        state="blocked"
    )
    [running] = b.claim(["pages"], 1, 30)
    work(backend, ["pages"], limit=1)  # "failing" fails; under "continue" the parent waits on

    assert queue.cancel(parent.job_id, backend=backend)
    assert queue.get_job(parent.job_id, backend=backend).state == "cancelled"  # type: ignore[union-attr]
    assert states(backend, parent.job_id) == {
        "running": "inflight",
        "failing": "failed",
        "waiting": "cancelled",
        "blocked": "cancelled",
    }
    assert b.lease_signals([(running.job_id, running.token)]).cancel_requested == {running.job_id}
    assert (
        AuditEvent.objects.using(db(backend))
        .filter(action="system.queue.flow.cascade", job_id=parent.job_id)
        .exists()
    )
    b.apply_many([outcome_of(backend, running)])  # it finished before it saw the request
    run_to_end(backend, ["reports", "pages"])
    assert collects() == []  # a cancelled flow never collects
    assert not OutboxEntry.objects.using(db(backend)).exists()


def test_an_in_flight_child_sees_ctx_cancelled_and_is_interrupted(
    backend: str, jobs: SimpleNamespace
) -> None:
    parent = jobs.Report.enqueue(
        {
            "children": [
                {"key": "spin", "job": "tests.flows.spin"},
                {"key": "bad", "job": "tests.flows.page", "payload": {"page": 1, "fail": True}},
            ]
        },
        backend=backend,
    )
    work(backend, ["reports"])
    consumer = queue.consume(["slow"], None, backend=backend, poll_interval=0.05)
    assert wait_until(
        lambda: CALLS["spin"][:1] == [("started", ids.child_id(parent.job_id, "spin"))], 10
    )
    work(backend, ["pages"])  # the failure is relayed by the nudge; the cascade requests the cancel
    spin_id = ids.child_id(parent.job_id, "spin")
    assert wait_until(lambda: queue.get_job(spin_id, backend=backend).state == "cancelled", 15)  # type: ignore[union-attr]
    assert CALLS["spin"][1] == ("JobCancelled", True)
    consumer.cancel(0)
    # the nudged relay is still delivering the cancelled child's report (it holds the parent)
    assert wait_until(lambda: not OutboxEntry.objects.using(db(backend)).exists(), 10)
    work(backend, ["reports"])
    [state] = collects()
    assert (state.failed, state.cancelled) == (1, 1)
