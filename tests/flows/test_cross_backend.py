"""Children on another backend than their parent (docs/flows.md): the parent on "default" (SQLite),
its children on "postgres". Children travel out through the parent database's outbox; reports
come back through the outbox of the child's database. Needs both databases."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from django_blamequeue import queue
from django_blamequeue.core import ids
from django_blamequeue.core.wire import report_from_body
from django_blamequeue.models import FlowDependency, Job, OutboxEntry

from .conftest import collects
from .steps import relay, run_to_end, work

pytestmark = [
    pytest.mark.django_db(transaction=True, databases="__all__"),
    pytest.mark.usefixtures("needs_postgres", "quiet_relay"),
]


@pytest.fixture
def needs_postgres() -> None:
    from tests.conftest import need_server

    need_server("postgres")


def outbox(db: str, kind: str) -> list[OutboxEntry]:
    return list(OutboxEntry.objects.using(db).filter(kind=kind).order_by("id"))


def test_children_on_another_backend_report_back_through_their_own_outbox(
    jobs: SimpleNamespace,
) -> None:
    parent = jobs.Continue.enqueue({"pages": 3, "broken": [2], "child_backend": "postgres"})
    work("default", ["reports"])
    assert Job.objects.using("default").filter(parent_id=parent.job_id).count() == 0
    sends = outbox("default", "enqueue")  # written with the fan-out ack, in SQLite
    assert [(e.backend, e.job_id) for e in sends] == [
        ("postgres", ids.child_id(parent.job_id, f"p{i}")) for i in range(3)
    ]

    assert relay("default").sent == 3
    kids = Job.objects.using("postgres").filter(parent_id=parent.job_id)
    assert sorted(kids.values_list("parent_backend", "state")) == [("default", "pending")] * 3

    work("postgres", ["pages"])
    reports = outbox("postgres", "report")
    assert len(reports) == 3 and {e.backend for e in reports} == {"default"}
    assert {report_from_body(e.body).parent_id for e in reports} == {parent.job_id}
    assert not outbox("default", "report")
    assert relay("postgres").sent == 3

    assert queue.get_job(parent.job_id).children == {"done": 2, "failed": 1}  # type: ignore[union-attr]
    work("default", ["reports"])
    [state] = collects()
    assert (state.completed, state.failed) == (2, 1)
    assert state.results["p1"] == {"page": 1, "words": 10}
    assert "page 2 is broken" in state.errors["p2"]
    assert queue.get_job(parent.job_id).state == "done"  # type: ignore[union-attr]
    assert not OutboxEntry.objects.using("default").exists()
    assert not OutboxEntry.objects.using("postgres").exists()


def test_cancelling_the_parent_cascades_to_children_on_another_backend(
    jobs: SimpleNamespace,
) -> None:
    parent = jobs.Report.enqueue({"pages": 3, "child_backend": "postgres"})
    work("default", ["reports"])
    relay("default")
    assert queue.cancel(parent.job_id, backend="default")
    kids = Job.objects.using("postgres").filter(parent_id=parent.job_id)
    assert set(kids.values_list("state", flat=True)) == {"cancelled"}
    relay("postgres")
    assert queue.get_job(parent.job_id).children == {"cancelled": 3}  # type: ignore[union-attr]


def test_a_fail_fast_settle_cascades_to_children_on_another_backend(jobs: SimpleNamespace) -> None:
    parent = jobs.Report.enqueue({"pages": 3, "broken": [0], "child_backend": "postgres"})
    work("default", ["reports"])
    relay("default")
    from django_blamequeue.backends import get_backend

    pg = get_backend("postgres")
    first = ids.child_id(parent.job_id, "p0")
    Job.objects.using("postgres").filter(parent_id=parent.job_id).exclude(id=first).update(
        priority=-1
    )
    work("postgres", ["pages"], limit=1)  # p0 fails
    relay("postgres")
    assert queue.get_job(parent.job_id).state == "pending"  # type: ignore[union-attr]
    assert set(
        Job.objects.using("postgres")
        .exclude(id=first)
        .filter(parent_id=parent.job_id)
        .values_list("state", flat=True)
    ) == {"cancelled"}
    assert pg.claim(["pages"], 10, 30) == []


def test_the_sweeper_repairs_children_on_another_backend(jobs: SimpleNamespace) -> None:
    from django_blamequeue.backends import get_backend
    from django_blamequeue.sweeper.flow_repair import FlowRepair

    parent = jobs.Report.enqueue({"pages": 2, "child_backend": "postgres"})
    work("default", ["reports"])
    OutboxEntry.objects.using("default").filter(job_id=ids.child_id(parent.job_id, "p0")).delete()
    relay("default")  # p1 lands; p0 was lost on the way
    repair = FlowRepair(get_backend("default"))
    assert repair.run_once() == {"relanded": 1}
    assert [e.job_id for e in outbox("default", "enqueue")] == [ids.child_id(parent.job_id, "p0")]
    relay("default")
    work("postgres", ["pages"])
    OutboxEntry.objects.using("postgres").filter(job_id=ids.child_id(parent.job_id, "p1")).delete()
    assert repair.run_once() == {"synthesized": 1}
    assert len(outbox("postgres", "report")) == 2  # the new report is in the child's database
    run_to_end("default", ["reports"])
    relay("postgres")
    run_to_end("default", ["reports"])
    assert queue.get_job(parent.job_id).state == "done"  # type: ignore[union-attr]
    deps = FlowDependency.objects.using("default").filter(job_id=parent.job_id)
    assert set(deps.values_list("status", flat=True)) == {"done"}
