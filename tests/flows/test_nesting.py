"""Nesting and plain handlers (docs/flows.md): a child may itself be a flow, depth is
tracked and capped with a clear error, and a job carrying flow state claimed by a plain handler
fails visibly."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.core import ids
from django_blamequeue.jobs import registry
from django_blamequeue.models import Job
from django_blamequeue.testing import wait_until

from .conftest import CALLS
from .steps import run_to_end, work

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def db(alias: str) -> str:
    return get_backend(alias).db  # type: ignore[attr-defined, no-any-return]


def test_a_child_that_is_a_flow_fans_out_and_collects_into_its_parent(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    book = jobs.Book.enqueue({"chapters": [2, 3]}, backend=backend)
    run_to_end(backend, ["reports", "pages"])
    info = queue.get_job(book.job_id, backend=backend)
    assert info is not None and info.state == "done"
    assert info.result == {
        "chapters": {
            "c0": {"pages": 2, "words": 10, "failed": []},
            "c1": {"pages": 3, "words": 30, "failed": []},
        },
        "errors": {},
    }
    rows = Job.objects.using(db(backend)).filter(flow_id=book.job_id)
    depth = {j.id: j.flow_depth for j in rows}
    c0 = ids.child_id(book.job_id, "c0")
    assert depth[book.job_id] == 0 and depth[c0] == 1
    assert depth[ids.child_id(c0, "p1")] == 2
    assert rows.count() == 1 + 2 + 5  # one flow: the root, its chapters and their pages
    chapter = queue.get_job(c0, backend=backend)
    assert chapter is not None
    assert (chapter.parent_id, chapter.flow_phase, chapter.children) == (
        book.job_id,
        "collect",
        {"done": 2},
    )
    assert len(CALLS["collect"]) == 3


def test_past_max_flow_depth_the_fan_out_fails_with_a_clear_error(
    backend: str, jobs: SimpleNamespace, quiet_relay: None, settings: Any
) -> None:
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "MAX_FLOW_DEPTH": 1}
    book = jobs.Book.enqueue({"chapters": [2]}, backend=backend)
    run_to_end(backend, ["reports", "pages"])
    chapter = queue.get_job(ids.child_id(book.job_id, "c0"), backend=backend)
    assert chapter is not None and (chapter.state, chapter.reason) == ("failed", "bad_job")
    assert chapter.error == (
        "fan-out refused: [BAD_FLOW] flow depth 2 is past MAX_FLOW_DEPTH=1 (nested flows too deep)"
    )
    assert Job.objects.using(db(backend)).filter(parent_id=chapter.job_id).count() == 0
    info = queue.get_job(book.job_id, backend=backend)
    assert info is not None and info.state == "done"
    assert "MAX_FLOW_DEPTH=1" in info.result["errors"]["c0"]


def test_cancelling_the_root_cascades_through_nested_flows(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    book = jobs.Book.enqueue({"chapters": [2, 2]}, backend=backend)
    work(backend, ["reports"])  # the book fans out
    work(backend, ["reports"])  # both chapters fan out
    assert queue.cancel(book.job_id, backend=backend)
    rows = Job.objects.using(db(backend)).filter(flow_id=book.job_id)
    assert sorted(set(rows.values_list("state", flat=True))) == ["cancelled"]
    assert rows.count() == 7
    run_to_end(backend, ["reports", "pages"])
    assert CALLS["page"] == [] and CALLS["collect"] == []


def test_a_flow_job_claimed_by_a_plain_handler_fails_saying_so(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    seen: list[Any] = []
    parent = jobs.Report.enqueue({"pages": 2}, backend=backend)
    consumer = queue.consume(
        ["reports"], lambda job, ctx: seen.append(job), backend=backend, poll_interval=0.05
    )
    assert wait_until(lambda: queue.get_job(parent.job_id, backend=backend).state == "failed", 10)  # type: ignore[union-attr]
    consumer.cancel(0)
    info = queue.get_job(parent.job_id, backend=backend)
    assert info is not None and info.reason == "bad_job"
    assert info.error == (
        f"job {parent.job_id} carries flow state (phase 'fan_out') but was claimed by a plain "
        "handler; register the @flow class 'tests.flows.Report.fail' on this worker"
    )
    assert seen == []  # the handler never saw it
    assert queue.dlq_list("reports", backend=backend)[0].job_id == parent.job_id


def test_a_flow_job_on_a_worker_without_the_flow_fails_saying_so(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    parent = jobs.Report.enqueue({"pages": 2}, backend=backend)
    work(backend, ["reports"])
    run_to_end(backend, ["pages"])  # collect is due now
    registry.unregister("tests.flows.Report.fail")

    @registry.job(queue="reports", name="tests.flows.Report.fail")
    def imposter(payload: Any) -> None:  # a plain @job under the flow's name
        raise AssertionError("must not run")

    work(backend, ["reports"])
    info = queue.get_job(parent.job_id, backend=backend)
    assert info is not None and info.state == "failed"
    assert "carries flow state (phase 'collect')" in (info.error or "")
    assert "plain handler" in (info.error or "")
