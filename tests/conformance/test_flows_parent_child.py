"""Parent/child flows, on every backend: fan-out parks the parent with its manifest,
children get deterministic ids, each child's outcome reaches the parent once, the parent
settles (no child pending, or the first failure under "fail") and ``collect`` runs once; a
fail-fast settle or a cancelled parent cancels the unfinished children; children may be flows
and may run on another backend."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from django_blamequeue import queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.core import ids
from django_blamequeue.core.records import Ack, Transition
from django_blamequeue.core.states import State
from django_blamequeue.jobs import enqueueing, registry
from django_blamequeue.testing import wait_until

from . import flowjobs
from .flowjobs import CALLS
from .support import another_backend, claim_one, jobs_in, row

pytestmark = pytest.mark.requires("supports_flows")


@pytest.fixture
def flows() -> Iterator[SimpleNamespace]:
    yield flowjobs.register()
    flowjobs.unregister()


def work(*backends: str) -> None:
    """Workers for the flow queues on each backend (stopped by the suite's teardown)."""
    for alias in dict.fromkeys(backends):
        queue.consume(["reports", "pages"], None, backend=alias, concurrency=4, poll_interval=0.05)


def state_of(backend: str, job_id: str) -> str | None:
    info = queue.get_job(job_id, backend=backend)
    return info.state if info is not None else None


def finished(backend: str, job_id: str, timeout: float = 30) -> Any:
    assert wait_until(lambda: state_of(backend, job_id) in ("done", "failed"), timeout), (
        f"job {job_id} is {state_of(backend, job_id)}"
    )
    return queue.get_job(job_id, backend=backend)


def test_a_flow_fans_out_runs_every_child_and_collects_once(
    backend: str, flows: SimpleNamespace
) -> None:
    parent = flows.Report.enqueue({"pages": 3}, backend=backend).job_id
    work(backend)
    info = finished(backend, parent)
    assert (info.state, info.result) == (
        "done",
        {"pages": 3, "words": 30, "failed": [], "cancelled": 0},
    )
    assert CALLS["fan_out"] == [parent]
    assert [job_id for job_id, _ in CALLS["collect"]] == [parent]
    assert sorted(CALLS["page"]) == [0, 1, 2]
    assert info.children == {"done": 3}
    for key in ("p0", "p1", "p2"):
        child = queue.get_job(ids.child_id(parent, key), backend=backend)
        assert child is not None
        assert (child.state, child.parent_id, child.flow_id) == ("done", parent, parent)


def test_a_parked_parent_shows_its_phase_and_its_childrens_tally(
    backend: str, engine: Backend, flows: SimpleNamespace
) -> None:
    parent = flows.Report.enqueue({"holds": 2}, backend=backend).job_id
    work(backend)
    assert wait_until(lambda: state_of(backend, parent) == "waiting_children", 20)
    info = queue.get_job(parent, backend=backend)
    assert info is not None and info.flow_phase == "collect"
    assert info.children is not None and sum(info.children.values()) == 2
    assert queue.cancel_flow(parent, backend=backend) >= 1


def test_a_repeated_enqueue_of_a_child_adds_nothing(
    backend: str, engine: Backend, flows: SimpleNamespace
) -> None:
    parent = flows.Report.enqueue({"pages": 2}, backend=backend).job_id
    work(backend)
    finished(backend, parent)
    before = jobs_in(engine, "pages")
    child = enqueueing.new_job(
        "pages",
        {"page": 0},
        name=flowjobs.PREFIX + "page",
        definition=registry.get(flowjobs.PREFIX + "page"),
        job_id=ids.child_id(parent, "p0"),
    )
    engine.enqueue_many([child])
    assert jobs_in(engine, "pages") == before == 2


def test_a_stale_fan_out_ack_changes_nothing(
    backend: str, engine: Backend, flows: SimpleNamespace
) -> None:
    parent = flows.Report.enqueue({"pages": 2}, backend=backend).job_id
    claimed = claim_one(engine, "reports")
    before = row(engine, parent)
    fan_out = Transition(state=State.WAITING_CHILDREN, children=())
    [result] = engine.apply_many([Ack(job_id=parent, token="0" * 32, transition=fan_out)])
    assert not result.ok
    assert row(engine, parent) == before
    assert claimed.job_id == parent and jobs_in(engine, "pages") == 0


def test_under_fail_the_first_failure_settles_and_cancels_the_unfinished_children(
    backend: str, flows: SimpleNamespace
) -> None:
    parent = flows.Report.enqueue({"pages": 1, "broken": [0], "holds": 2}, backend=backend).job_id
    work(backend)
    info = finished(backend, parent)
    assert info.state == "done"
    assert info.result["failed"] == ["p0"]
    for key in ("h0", "h1"):
        hold = ids.child_id(parent, key)
        assert wait_until(lambda hold=hold: state_of(backend, hold) == "cancelled", 20)
    assert len(CALLS["collect"]) == 1


def test_under_continue_collect_sees_every_outcome(backend: str, flows: SimpleNamespace) -> None:
    parent = flows.Continue.enqueue({"pages": 3, "broken": [1]}, backend=backend).job_id
    work(backend)
    info = finished(backend, parent)
    assert info.result == {"pages": 2, "words": 20, "failed": ["p1"], "cancelled": 0}
    [(_, state)] = CALLS["collect"]
    assert (state.completed, state.failed, state.cancelled, state.pending) == (2, 1, 0, 0)
    assert "page 1 is broken" in state.errors["p1"]
    assert state.results["p2"] == {"page": 2, "words": 20}
    outcomes = state.outcomes
    assert list(outcomes) == ["p0", "p1", "p2"]
    assert [(o.state, o.ok) for o in outcomes.values()] == [
        ("done", True),
        ("failed", False),
        ("done", True),
    ]
    assert outcomes["p2"].result == {"page": 2, "words": 20} and outcomes["p2"].error is None
    assert outcomes["p1"].result is None and "page 1 is broken" in (outcomes["p1"].error or "")
    failed = outcomes["p1"]
    assert (failed.job_id, failed.backend) == (ids.child_id(parent, "p1"), backend)
    child = queue.get_job(failed.job_id, backend=failed.backend)
    assert child is not None and child.error_type == "builtins.ValueError"


def test_under_continue_a_failed_child_lets_its_running_siblings_finish(
    backend: str, flows: SimpleNamespace
) -> None:
    parent = flows.Continue.enqueue({"pages": 1, "broken": [0], "holds": 1}, backend=backend)
    work(backend)
    hold = ids.child_id(parent.job_id, "h0")
    assert wait_until(lambda: state_of(backend, ids.child_id(parent.job_id, "p0")) == "failed", 20)
    assert state_of(backend, hold) == "inflight"
    assert CALLS["collect"] == []  # the flow waits for the sibling, which is not cancelled
    queue.cancel(hold, backend=backend)  # the sibling ends; only now does the flow collect
    info = finished(backend, parent.job_id)
    assert (info.result["pages"], info.result["cancelled"]) == (0, 1)
    [(_, state)] = CALLS["collect"]
    assert [o.state for o in state.outcomes.values()] == ["cancelled", "failed"]


def test_an_empty_fan_out_collects_at_once(backend: str, flows: SimpleNamespace) -> None:
    parent = flows.Report.enqueue({"pages": 0}, backend=backend).job_id
    work(backend)
    assert finished(backend, parent).result == {
        "pages": 0,
        "words": 0,
        "failed": [],
        "cancelled": 0,
    }


def test_cancelling_the_parent_cancels_its_unfinished_children(
    backend: str, flows: SimpleNamespace
) -> None:
    parent = flows.Report.enqueue({"holds": 2}, backend=backend).job_id
    work(backend)
    holds = [ids.child_id(parent, k) for k in ("h0", "h1")]
    assert wait_until(lambda: all(state_of(backend, h) == "inflight" for h in holds), 20)
    assert queue.cancel(parent, backend=backend)
    assert wait_until(lambda: state_of(backend, parent) == "cancelled", 20)
    for hold in holds:
        assert wait_until(lambda hold=hold: state_of(backend, hold) == "cancelled", 20)
    assert CALLS["collect"] == []


def test_a_child_may_itself_be_a_flow(backend: str, flows: SimpleNamespace) -> None:
    book = flows.Book.enqueue({"chapters": [2, 3]}, backend=backend).job_id
    work(backend)
    info = finished(backend, book, timeout=45)
    assert info.result == {"chapters": {"c0": 10, "c1": 30}}
    chapter = queue.get_job(ids.child_id(book, "c1"), backend=backend)
    assert chapter is not None and chapter.parent_id == book and chapter.state == "done"


def test_a_job_carrying_flow_state_claimed_by_a_plain_handler_fails_visibly(
    backend: str, flows: SimpleNamespace
) -> None:
    ran: list[Any] = []
    parent = flows.Report.enqueue({"pages": 1}, backend=backend).job_id
    queue.consume("reports", lambda job, ctx: ran.append(job), backend=backend, poll_interval=0.05)
    info = finished(backend, parent)
    assert (info.state, info.reason) == ("failed", "bad_job")
    assert "flow state" in (info.error or "")
    assert ran == []


@pytest.mark.all_databases
def test_children_may_run_on_another_backend_than_their_parent(
    backend: str, flows: SimpleNamespace
) -> None:
    other = another_backend(backend)
    parent = flows.Report.enqueue(
        {"pages": 2, "broken": [1], "child_backend": other}, backend=backend
    ).job_id
    work(backend, other)
    info = finished(backend, parent)
    assert info.result["failed"] == ["p1"]
    child = queue.get_job(ids.child_id(parent, "p0"), backend=other)
    assert child is not None and (child.state, child.parent_id) == ("done", parent)
    assert queue.get_job(ids.child_id(parent, "p0"), backend=backend) is None
    [(_, state)] = CALLS["collect"]
    assert state.outcomes["p0"].backend == other
    assert state.outcomes["p0"].job_id == ids.child_id(parent, "p0")
