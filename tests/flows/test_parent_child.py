"""Parent/child flows (docs/flows.md): fan-out, reports through the outbox, settle, collect."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_blamequeue import Child, flow, job, queue
from django_blamequeue.jobs import registry
from django_blamequeue.testing import wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")
COLLECTS: list[Any] = []


@pytest.fixture
def report_flow() -> Iterator[Any]:
    @job(queue="pages", name="tests.flows.render_page", max_attempts=1)
    def render_page(payload: dict[str, Any]) -> dict[str, Any]:
        if payload.get("fail"):
            raise ValueError(f"page {payload['page']} is broken")
        return {"page": payload["page"], "words": 10 * payload["page"]}

    def make(mode: str) -> Any:
        @flow(queue="reports", on_child_failure=mode, name=f"tests.flows.BuildReport.{mode}")  # type: ignore[arg-type]
        class BuildReport:
            def fan_out(self, payload: dict[str, Any]) -> list[Child]:
                return [
                    Child(
                        render_page,
                        {"page": i, "fail": i in payload.get("broken", [])},
                        key=f"p{i}",
                    )
                    for i in range(payload["pages"])
                ]

            def collect(self, payload: dict[str, Any], state: Any) -> dict[str, Any]:
                COLLECTS.append(state)
                return {
                    "pages": len(state.results),
                    "words": sum(r["words"] for r in state.results.values()),
                    "failed": sorted(state.errors),
                }

        return BuildReport

    COLLECTS.clear()
    yield make
    for name in list(registry.registered()):
        if name.startswith("tests.flows."):
            registry.unregister(name)


def test_a_flow_fans_out_collects_and_stores_collects_result(
    backend: str, report_flow: Any
) -> None:
    BuildReport = report_flow("fail")
    parent = BuildReport.enqueue({"pages": 5}, backend=backend)
    queue.consume(["reports", "pages"], None, backend=backend, concurrency=4, poll_interval=0.05)
    assert wait_until(lambda: queue.get_job(parent.job_id, backend=backend).state == "done", 20)
    info = queue.get_job(parent.job_id, backend=backend)
    assert info.result == {"pages": 5, "words": 100, "failed": []}
    assert info.children == {"done": 5}
    assert len(COLLECTS) == 1


def test_continue_collects_after_every_child_settled_with_errors_by_key(
    backend: str, report_flow: Any
) -> None:
    BuildReport = report_flow("continue")
    parent = BuildReport.enqueue({"pages": 4, "broken": [2]}, backend=backend)
    queue.consume(["reports", "pages"], None, backend=backend, concurrency=4, poll_interval=0.05)
    assert wait_until(lambda: queue.get_job(parent.job_id, backend=backend).state == "done", 20)
    info = queue.get_job(parent.job_id, backend=backend)
    assert info.result == {"pages": 3, "words": 40, "failed": ["p2"]}
    state = COLLECTS[0]
    assert (state.completed, state.failed, state.pending) == (3, 1, 0)
    assert "page 2 is broken" in state.errors["p2"]


def test_fail_fast_settles_at_the_first_failure_and_cancels_the_rest(
    backend: str, report_flow: Any
) -> None:
    from django_blamequeue.backends import get_backend
    from django_blamequeue.core import lifecycle
    from django_blamequeue.core.records import Ack
    from django_blamequeue.relay.outbox import Relay

    BuildReport = report_flow("fail")
    parent = BuildReport.enqueue({"pages": 30, "broken": [0]}, backend=backend)
    parents = queue.consume(["reports"], None, backend=backend, poll_interval=0.05)
    assert wait_until(
        lambda: queue.get_job(parent.job_id, backend=backend).state == "waiting_children", 10
    )
    b = get_backend(backend)
    [first] = b.claim(["pages"], 1, 30)
    fail = lifecycle.decide(
        lifecycle.Raised(ValueError("broken")), attempt=1, max_attempts=1, policy=lifecycle.Policy()
    )
    assert b.apply_many([Ack(job_id=first.job_id, token=first.token, transition=fail)])[0].ok
    Relay().run_once()
    assert wait_until(lambda: queue.get_job(parent.job_id, backend=backend).state == "done", 10)
    children = [
        j for j in queue.flow_jobs(parent.job_id, backend=backend) if j.parent_id == parent.job_id
    ]
    assert len(children) == 30
    assert sorted({j.state for j in children}) == ["cancelled", "failed"]
    assert sum(j.state == "cancelled" for j in children) == 29
    assert len(COLLECTS) == 1 and COLLECTS[0].failed == 1
    parents.cancel(0)


def test_a_re_claimed_parent_never_fans_out_twice(backend: str, report_flow: Any) -> None:
    from django_blamequeue.backends import get_backend
    from django_blamequeue.models import FlowDependency, Job

    BuildReport = report_flow("fail")
    parent = BuildReport.enqueue({"pages": 3}, backend=backend)
    consumer = queue.consume(["reports"], None, backend=backend, poll_interval=0.05)
    assert wait_until(
        lambda: queue.get_job(parent.job_id, backend=backend).state == "waiting_children", 10
    )
    consumer.cancel(0)
    consumer.join(5)
    db = get_backend(backend).db  # type: ignore[attr-defined]
    assert FlowDependency.objects.using(db).filter(job_id=parent.job_id, kind="child").count() == 3
    assert Job.objects.using(db).filter(parent_id=parent.job_id).count() == 3
    child_ids = sorted(
        Job.objects.using(db).filter(parent_id=parent.job_id).values_list("id", flat=True)
    )
    again = BuildReport.enqueue({"pages": 3}, backend=backend)
    assert again.job_id != parent.job_id
    assert (
        sorted(Job.objects.using(db).filter(parent_id=parent.job_id).values_list("id", flat=True))
        == child_ids
    )


def test_a_worker_settles_the_parents_its_acks_queued_before_it_exits(
    backend: str, report_flow: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a relay thread (nudges off) only the worker's exit can settle the parent."""
    from django_blamequeue.relay import outbox

    monkeypatch.setattr(outbox, "nudge", lambda **_: None)
    BuildReport = report_flow("fail")
    parent = BuildReport.enqueue({"pages": 3}, backend=backend)
    queue.consume(["reports", "pages"], None, backend=backend, concurrency=2, poll_interval=0.05)
    assert wait_until(
        lambda: queue.get_job(parent.job_id, backend=backend).children == {"done": 3}, 20
    )
    assert queue.get_job(parent.job_id, backend=backend).state == "waiting_children"
    queue.shutdown(timeout=10)
    assert queue.get_job(parent.job_id, backend=backend).state == "pending"
