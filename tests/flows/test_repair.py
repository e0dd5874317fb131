"""The flow sweeper (docs/flows.md): one deterministic test per repair path —
a lost report, a lost settle, a child that never landed, a kill between the fan-out ack and the
child inserts — plus the settle and cascade it finishes, and per-parent isolation."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.db import transaction

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.conf import get_settings
from django_blamequeue.core import ids
from django_blamequeue.models import FlowDependency, Job, OutboxEntry
from django_blamequeue.sweeper import services_for
from django_blamequeue.sweeper.flow_repair import FlowRepair

from .conftest import collects
from .steps import outcome_of, relay, run_to_end, work
from .steps import repair as repair_pass

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def db(alias: str) -> str:
    return get_backend(alias).db  # type: ignore[attr-defined, no-any-return]


def repair(alias: str) -> dict[str, int]:
    return FlowRepair(get_backend(alias)).run_once()


def test_the_flow_sweeper_runs_in_every_sweeper_every_30_seconds(backend: str) -> None:
    services = {s.name: s for s in services_for([get_backend(backend)])}
    assert services[f"flow_repair[{backend}]"].period == get_settings().flow_sweep_interval == 30.0
    assert "relay" in services and "scheduler" in services


def test_a_healthy_flow_needs_no_repair(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    jobs.Report.enqueue({"pages": 3}, backend=backend)
    work(backend, ["reports"])
    work(backend, ["pages"], limit=1)  # recorded; its settle check waits for the relay
    assert repair(backend) == {}


def other(alias: str) -> str:
    """The other local backend: children there report back through their outbox."""
    from tests.conftest import need_server

    need_server("postgres")
    return "postgres" if alias == "default" else "default"


def test_a_deleted_report_row_is_synthesized_again(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    kids = other(backend)  # a child elsewhere reports through its database's outbox
    parent = jobs.Report.enqueue({"pages": 2, "child_backend": kids}, backend=backend)
    work(backend, ["reports"])
    relay()
    work(kids, ["pages"])
    lost = OutboxEntry.objects.using(db(kids)).filter(kind="report").first()
    assert lost is not None
    lost.delete()
    relay()
    assert queue.get_job(parent.job_id, backend=backend).children == {"done": 1, "pending": 1}  # type: ignore[union-attr]

    assert repair(backend) == {"synthesized": 1}
    [again] = OutboxEntry.objects.using(db(kids)).filter(kind="report")
    assert again.job_id == lost.job_id
    assert repair(backend) == {}  # the new row is in transit: nothing more to do
    relay()
    assert queue.get_job(parent.job_id, backend=backend).state == "pending"  # type: ignore[union-attr]
    run_to_end(backend, ["reports", "pages"])
    assert len(collects()) == 1 and collects()[0].completed == 2


def test_a_settle_lost_with_its_process_is_done_by_the_sweeper(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    """The acks recorded every report and committed; the process died before its relay
    settled the parent (the queued settle was only in its memory)."""
    from django_blamequeue.relay import outbox

    parent = jobs.Report.enqueue({"pages": 2}, backend=backend)
    work(backend, ["reports"])
    work(backend, ["pages"])
    outbox._to_settle.clear()  # the dead process's queue
    assert relay().settled == 0
    assert queue.get_job(parent.job_id, backend=backend).children == {"done": 2}  # type: ignore[union-attr]
    assert queue.get_job(parent.job_id, backend=backend).state == "waiting_children"  # type: ignore[union-attr]

    assert repair(backend) == {"settled": 1}
    assert repair(backend) == {}
    run_to_end(backend, ["reports", "pages"])
    assert len(collects()) == 1 and collects()[0].completed == 2


def _fail_first_of_three(backend: str, jobs: SimpleNamespace) -> str:
    """A "fail" flow of three pages, all three claimed, only p0 acked (failed); the parent id."""
    parent = jobs.Report.enqueue({"pages": 3, "broken": [0]}, backend=backend)
    work(backend, ["reports"])
    b = get_backend(backend)
    fail_id = ids.child_id(parent.job_id, "p0")
    [failing] = [c for c in b.claim(["pages"], 3, 30) if c.job_id == fail_id]
    b.apply_many([outcome_of(backend, failing)])
    return parent.job_id


def test_a_fail_fast_settle_lost_with_its_process_is_done_by_the_sweeper(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    from django_blamequeue.relay import outbox

    parent_id = _fail_first_of_three(backend, jobs)
    outbox._to_settle.clear()

    # p0 failed under "fail": due now, not at the end; its settle cascades, and the pass's
    # cascade step asks the two children still running once more (idempotent).
    assert repair(backend) == {"settled": 1, "cascaded": 2}
    live = Job.objects.using(db(backend)).filter(parent_id=parent_id, state="inflight")
    assert sorted(live.values_list("cancel_requested", flat=True)) == [True, True]


def test_a_child_row_dropped_before_it_landed_is_enqueued_again(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    parent = jobs.Report.enqueue({"pages": 3}, backend=backend)
    work(backend, ["reports"])
    gone = ids.child_id(parent.job_id, "p1")
    Job.objects.using(db(backend)).filter(id=gone).delete()

    assert repair(backend) == {"relanded": 1}
    kid = Job.objects.using(db(backend)).get(id=gone)
    assert (kid.state, kid.parent_id, kid.flow_key, kid.flow_depth) == (
        "pending",
        parent.job_id,
        "p1",
        1,
    )
    assert repair(backend) == {}
    run_to_end(backend, ["reports", "pages"])
    assert collects()[0].completed == 3


def test_a_kill_between_the_fan_out_ack_and_the_child_inserts_is_mended(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    b = get_backend(backend)
    parent = jobs.Report.enqueue({"pages": 4}, backend=backend)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(b.manifests, "land", lambda children: None)  # the manifest is stored, no child is
        work(backend, ["reports"])
    assert FlowDependency.objects.using(db(backend)).filter(job_id=parent.job_id).count() == 4
    assert Job.objects.using(db(backend)).filter(parent_id=parent.job_id).count() == 0

    assert repair(backend) == {"relanded": 4}
    run_to_end(backend, ["reports", "pages"])
    info = queue.get_job(parent.job_id, backend=backend)
    assert info is not None and info.state == "done" and info.children == {"done": 4}
    assert len(collects()) == 1


def test_the_sweeper_does_not_reland_children_of_a_parent_that_settled(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    parent = jobs.Report.enqueue({"pages": 2}, backend=backend)
    work(backend, ["reports"])
    Job.objects.using(db(backend)).filter(parent_id=parent.job_id).delete()
    assert queue.cancel(parent.job_id, backend=backend)
    assert repair(backend) == {}
    assert Job.objects.using(db(backend)).filter(parent_id=parent.job_id).count() == 0


def test_a_parent_whose_settle_was_missed_is_settled(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    parent = jobs.Report.enqueue({"pages": 2}, backend=backend)
    work(backend, ["reports"])
    work(backend, ["pages"])
    relay()
    Job.objects.using(db(backend)).filter(id=parent.job_id).update(state="waiting_children")
    assert repair(backend) == {"settled": 1}
    assert queue.get_job(parent.job_id, backend=backend).state == "pending"  # type: ignore[union-attr]


def test_a_cascade_missed_after_a_fail_fast_settle_is_done_by_the_sweeper(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    parent_id = _fail_first_of_three(backend, jobs)  # the others stay in flight
    b = get_backend(backend)
    with transaction.atomic(using=db(backend)):
        assert b.settle_reported([parent_id]) == [parent_id]  # the relay's settle
        # a crash right after the settle, before the cascade's effect (simulated: undone)
        Job.objects.using(db(backend)).filter(parent_id=parent_id, state="inflight").update(
            cancel_requested=False
        )
    assert queue.get_job(parent_id, backend=backend).state == "pending"  # type: ignore[union-attr]

    assert repair(backend) == {"cascaded": 2}
    live = Job.objects.using(db(backend)).filter(parent_id=parent_id, state="inflight")
    assert sorted(live.values_list("cancel_requested", flat=True)) == [True, True]


def test_one_broken_flow_is_logged_and_skipped_and_never_blocks_the_rest(
    backend: str, jobs: SimpleNamespace, quiet_relay: None, caplog: pytest.LogCaptureFixture
) -> None:
    broken = jobs.Report.enqueue({"pages": 2}, backend=backend)
    healthy = jobs.Report.enqueue({"pages": 2}, backend=backend)
    work(backend, ["reports"])
    deps = FlowDependency.objects.using(db(backend))
    deps.filter(job_id=broken.job_id, key="p0").update(
        spec={"backend": backend, "job": {"bogus": 1}}
    )
    Job.objects.using(db(backend)).filter(parent_id__in=[broken.job_id, healthy.job_id]).delete()

    assert repair(backend) == {"relanded": 2, "skipped": 1}
    assert f"flow repair skipped parent {broken.job_id}" in caplog.text
    assert Job.objects.using(db(backend)).filter(parent_id=healthy.job_id).count() == 2
    # the broken parent's savepoint rolled back as a whole: nothing half-repaired
    assert Job.objects.using(db(backend)).filter(parent_id=broken.job_id).count() == 0


def test_the_sweeper_pages_through_every_waiting_parent(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    for _ in range(5):
        jobs.Report.enqueue({"pages": 1}, backend=backend)
    work(backend, ["reports"])
    Job.objects.using(db(backend)).filter(parent_id__isnull=False).delete()
    assert repair_pass(get_backend(backend), limit=2) == {
        "relanded": 5,
        "synthesized": 0,
        "settled": 0,
        "cascaded": 0,
        "skipped": 0,
    }
