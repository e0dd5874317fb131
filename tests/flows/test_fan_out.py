"""Fan-out and collect (docs/flows.md): the state collect sees, what get_job shows,
the manifest stored atomically with the parking of the parent, deterministic child ids, and a
parent that never fans out twice."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.core import ids
from django_blamequeue.core.wire import job_from_body
from django_blamequeue.models import FlowDependency, Job
from django_blamequeue.serializers import decode

from .conftest import CALLS, collects
from .steps import outcome_of, relay, run_to_end, work

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def db(alias: str) -> str:
    return get_backend(alias).db  # type: ignore[attr-defined, no-any-return]


def child(parent_id: str, key: str) -> str:
    return ids.child_id(parent_id, key)


def test_collect_sees_the_tally_the_results_and_the_errors_by_key(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    parent = jobs.Continue.enqueue({"pages": 6, "broken": [1, 3]}, backend=backend)
    work(backend, ["reports"])
    assert queue.cancel(child(parent.job_id, "p5"), backend=backend)
    run_to_end(backend, ["reports", "pages"])

    [state] = collects()
    assert (state.completed, state.failed, state.cancelled, state.pending) == (3, 2, 1, 0)
    assert state.total == 6
    assert state.results == {
        "p0": {"page": 0, "words": 0},
        "p2": {"page": 2, "words": 20},
        "p4": {"page": 4, "words": 40},
    }
    assert sorted(state.errors) == ["p1", "p3"]
    assert state.errors["p3"] == "ValueError: page 3 is broken"
    assert state.states["p5"] == "cancelled"
    info = queue.get_job(parent.job_id, backend=backend)
    assert info is not None and info.state == "done"
    assert info.result == {"pages": 3, "words": 60, "failed": ["p1", "p3"]}  # collect's result


def test_get_job_shows_the_phase_and_the_childrens_tally(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    parent = jobs.Report.enqueue({"pages": 3}, backend=backend)

    def show() -> tuple[str, str | None, dict[str, int] | None]:
        info = queue.get_job(parent.job_id)  # found without naming the backend
        assert info is not None
        return info.state, info.flow_phase, dict(info.children or {})

    assert show() == ("pending", "fan_out", {})
    work(backend, ["reports"])
    assert show() == ("waiting_children", "collect", {"pending": 3})
    b = get_backend(backend)
    [first] = b.claim(["pages"], 1, 30)
    b.apply_many([outcome_of(backend, first)])
    assert show() == ("waiting_children", "collect", {"done": 1, "pending": 2})  # with the ack
    relay()
    assert show() == ("waiting_children", "collect", {"done": 1, "pending": 2})
    run_to_end(backend, ["reports", "pages"])
    assert show() == ("done", "collect", {"done": 3})
    kid = queue.get_job(child(parent.job_id, "p1"), backend=backend)
    assert kid is not None
    assert (kid.parent_id, kid.flow_id, kid.flow_key, kid.flow_phase, kid.children) == (
        parent.job_id,
        parent.job_id,
        "p1",
        None,
        None,
    )


def test_the_fan_out_ack_stores_the_full_manifest_and_parks_the_parent(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    parent = jobs.Report.enqueue({"pages": 3}, backend=backend)
    work(backend, ["reports"])
    rows = {
        d.key: d for d in FlowDependency.objects.using(db(backend)).filter(job_id=parent.job_id)
    }
    assert sorted(rows) == ["p0", "p1", "p2"]
    for key, dep in rows.items():
        assert (dep.kind, dep.status, dep.depends_on_id) == (
            "child",
            "pending",
            child(parent.job_id, key),
        )
        spec = job_from_body(dep.spec["job"])  # the child's full spec: enough to re-enqueue it
        assert dep.spec["backend"] == backend
        assert (spec.name, spec.queue, spec.parent_id, spec.flow_key, spec.flow_depth) == (
            "tests.flows.page",
            "pages",
            parent.job_id,
            key,
            1,
        )
        assert decode(
            spec.payload.content_type, spec.payload.content_encoding, spec.payload.body
        ) == {"page": int(key[1:]), "fail": False}
    kids = Job.objects.using(db(backend)).filter(parent_id=parent.job_id)
    assert (
        sorted(kids.values_list("state", "parent_backend", "flow_depth"))
        == [("pending", backend, 1)] * 3
    )
    p = Job.objects.using(db(backend)).get(id=parent.job_id)
    assert (p.state, p.flow_phase, p.lease_token) == ("waiting_children", "collect", None)


def test_a_fan_out_ack_that_fails_half_way_leaves_nothing_behind(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    b = get_backend(backend)
    parent = jobs.Report.enqueue({"pages": 3}, backend=backend)
    [claimed] = b.claim(["reports"], 1, 30)
    ack = outcome_of(backend, claimed)

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("connection lost while inserting the children")

    with pytest.MonkeyPatch.context() as m, pytest.raises(RuntimeError):
        m.setattr(b, "enqueue_many", boom)
        b.apply_many([ack])
    assert FlowDependency.objects.using(db(backend)).filter(job_id=parent.job_id).count() == 0
    assert Job.objects.using(db(backend)).filter(parent_id=parent.job_id).count() == 0
    p = Job.objects.using(db(backend)).get(id=parent.job_id)
    assert (p.state, p.lease_token, p.flow_phase) == ("inflight", claimed.token, "fan_out")

    # the worker keeps the ack and sends it again
    assert b.apply_many([ack])[0].ok
    assert FlowDependency.objects.using(db(backend)).filter(job_id=parent.job_id).count() == 3
    assert Job.objects.using(db(backend)).filter(parent_id=parent.job_id).count() == 3


def test_child_ids_are_derived_so_a_repeated_enqueue_creates_nothing(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    b = get_backend(backend)
    parent = jobs.Report.enqueue({"pages": 3}, backend=backend)
    work(backend, ["reports"])
    kids = Job.objects.using(db(backend)).filter(parent_id=parent.job_id)
    assert set(kids.values_list("id", flat=True)) == {
        child(parent.job_id, f"p{i}") for i in range(3)
    }
    work(backend, ["pages"], limit=1)  # one child is done now
    before = sorted(kids.values_list("id", "state", "attempts"))

    specs = [
        job_from_body(d.spec["job"])
        for d in FlowDependency.objects.using(db(backend)).filter(job_id=parent.job_id)
    ]
    answers = b.enqueue_many(specs)  # what a repair or a repeated fan-out would send
    assert sorted(a.job_id for a in answers) == sorted(j for j, _, _ in before)
    assert sorted(kids.values_list("id", "state", "attempts")) == before
    assert Job.objects.using(db(backend)).count() == 4


def test_children_name_their_flow_the_fan_out_and_the_object_they_are_about(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    spec = {"job": "tests.flows.page", "payload": {"page": 0}, "key": "a", "about": "auth.user:1"}
    parent = jobs.Report.enqueue({"children": [spec]}, backend=backend)
    work(backend, ["reports"])
    info = queue.get_job(child(parent.job_id, "a"), backend=backend)
    assert info is not None and info.about == "auth.user:1"
    assert info.origin is not None and info.origin["flow"] == parent.job_id
    assert info.origin["site"].startswith("tests/flows/conftest.py:")
    assert info.origin["site"].endswith(".Report.fan_out")


def test_a_parent_is_re_pended_into_collect_and_never_fans_out_again(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    parent = jobs.Report.enqueue({"pages": 2}, backend=backend)
    run_to_end(backend, ["reports", "pages"])
    assert CALLS["fan_out"] == [parent.job_id]
    assert [j for j, _ in CALLS["collect"]] == [parent.job_id]
    assert FlowDependency.objects.using(db(backend)).filter(job_id=parent.job_id).count() == 2


def test_a_stale_fan_out_ack_of_a_re_claimed_parent_is_refused(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    b = get_backend(backend)
    parent = jobs.Report.enqueue({"pages": 3}, backend=backend)
    [first] = b.claim(["reports"], 1, 30)
    late = outcome_of(backend, first)  # the worker stalls before it acks
    later = b.now() + timedelta(seconds=60)
    assert b.rescue_expired(later, max_stalled=5).repended == 1
    work(backend, ["reports"], now=later)  # another worker fans out
    [result] = b.apply_many([late])
    assert not result.ok
    assert FlowDependency.objects.using(db(backend)).filter(job_id=parent.job_id).count() == 3
    assert Job.objects.using(db(backend)).filter(parent_id=parent.job_id).count() == 3
    assert CALLS["fan_out"] == [parent.job_id, parent.job_id]  # ran twice, stored once


def test_a_parent_crashing_in_collect_collects_again_without_fanning_out(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    b = get_backend(backend)
    parent = jobs.Report.enqueue({"pages": 2}, backend=backend)
    work(backend, ["reports"])
    work(backend, ["pages"])
    relay()
    [collecting] = b.claim(["reports"], 1, 30)
    assert collecting.flow_phase == "collect"
    later = b.now() + timedelta(seconds=60)
    assert b.rescue_expired(later, max_stalled=5).repended == 1
    work(backend, ["reports"], now=later)
    info = queue.get_job(parent.job_id, backend=backend)
    assert info is not None and info.state == "done"
    assert CALLS["fan_out"] == [parent.job_id]
    assert len(CALLS["collect"]) == 1  # the crashed attempt never got to call collect


def test_a_flow_with_no_children_collects_at_once(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    parent = jobs.Report.enqueue({"pages": 0}, backend=backend)
    work(backend, ["reports"])
    info = queue.get_job(parent.job_id, backend=backend)
    assert info is not None and info.state == "pending"
    work(backend, ["reports"])
    [state] = collects()
    assert state.total == 0
    assert queue.get_job(parent.job_id, backend=backend).result == {  # type: ignore[union-attr]
        "pages": 0,
        "words": 0,
        "failed": [],
    }


@pytest.mark.parametrize(
    ("children", "message"),
    [
        (
            [{"key": "a", "job": "tests.flows.page"}, {"key": "a", "job": "tests.flows.page"}],
            "child keys must be unique",
        ),
        ([{"key": "", "job": "tests.flows.page"}], "child keys must be unique non-empty"),
        ([{"key": "a", "job": "tests.flows.nope"}], "'tests.flows.nope' is not registered"),
    ],
)
def test_a_bad_fan_out_fails_the_parent_with_the_reason(
    backend: str, jobs: SimpleNamespace, quiet_relay: None, children: Any, message: str
) -> None:
    parent = jobs.Report.enqueue({"children": children}, backend=backend)
    work(backend, ["reports"])
    info = queue.get_job(parent.job_id, backend=backend)
    assert info is not None and (info.state, info.reason) == ("failed", "bad_job")
    assert "fan-out refused" in (info.error or "") and message in (info.error or "")
    assert Job.objects.using(db(backend)).filter(parent_id=parent.job_id).count() == 0
