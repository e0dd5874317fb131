"""Child reports (docs/flows.md): recorded with the child's terminal transition —
on a parent of the same backend by the ack itself, for a parent elsewhere through the
outbox — delivered at least once and recorded exactly once, the relay nudged by each terminal
ack (it settles the parents after the ack's commit), paging with a cursor in batches of 500
and skipping a broken row or a parent that fails to settle."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.db import transaction

from django_blamequeue import audit, queue
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.jobtable.flows import Flows
from django_blamequeue.core import ids, wire
from django_blamequeue.core.wire import report_from_body
from django_blamequeue.jobs import enqueueing
from django_blamequeue.models import AuditEvent, FlowDependency, Job, OutboxEntry, OutboxQuerySet
from django_blamequeue.relay import outbox
from django_blamequeue.relay.outbox import BATCH, Relay
from django_blamequeue.testing import wait_until

from .conftest import collects
from .steps import outcome_of, relay, repair, run_to_end, work

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def db(alias: str) -> str:
    return get_backend(alias).db  # type: ignore[attr-defined, no-any-return]


def dep_of(alias: str, parent_id: str, key: str) -> FlowDependency:
    return FlowDependency.objects.using(db(alias)).get(job_id=parent_id, key=key)


def other(alias: str) -> str:
    """The other local backend: children there report back through their outbox."""
    from tests.conftest import need_server

    need_server("postgres")
    return "postgres" if alias == "default" else "default"


def test_a_childs_terminal_ack_records_its_report_in_the_same_transaction(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    """Parent and child on one backend: the ack writes the manifest row itself, no outbox."""
    b = get_backend(backend)
    parent = jobs.Report.enqueue({"pages": 1}, backend=backend)
    work(backend, ["reports"])
    [claimed] = b.claim(["pages"], 1, 30)
    ack = outcome_of(backend, claimed)

    def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("recording the report failed")

    with pytest.MonkeyPatch.context() as m, pytest.raises(RuntimeError):
        m.setattr(Flows, "record_children", boom)
        b.apply_many([ack])
    assert Job.objects.using(db(backend)).get(id=claimed.job_id).state == "inflight"  # rolled back
    assert dep_of(backend, parent.job_id, "p0").status == "pending"

    assert b.apply_many([ack])[0].ok
    assert dep_of(backend, parent.job_id, "p0").status == "done"
    assert not OutboxEntry.objects.using(db(backend)).exists()
    # The settle is the relay's, after the ack's commit (never inside an ack: lock order).
    assert queue.get_job(parent.job_id, backend=backend).state == "waiting_children"  # type: ignore[union-attr]
    assert relay().settled == 1
    assert queue.get_job(parent.job_id, backend=backend).state == "pending"  # type: ignore[union-attr]


def test_a_report_for_a_parent_elsewhere_is_written_to_the_outbox_in_the_same_transaction(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    kids = other(backend)
    parent = jobs.Report.enqueue({"pages": 1, "child_backend": kids}, backend=backend)
    work(backend, ["reports"])
    relay()  # the child lands on the other backend
    c = get_backend(kids)
    [claimed] = c.claim(["pages"], 1, 30)
    ack = outcome_of(kids, claimed)

    def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the outbox insert failed")

    with pytest.MonkeyPatch.context() as m, pytest.raises(RuntimeError):
        m.setattr(OutboxQuerySet, "add", boom)
        c.apply_many([ack])
    assert Job.objects.using(db(kids)).get(id=claimed.job_id).state == "inflight"  # rolled back

    assert c.apply_many([ack])[0].ok
    [row] = OutboxEntry.objects.using(db(kids)).filter(kind="report")
    assert (row.job_id, row.backend, row.sent_at) == (claimed.job_id, backend, None)
    report = report_from_body(row.body)
    assert (report.parent_id, report.child_id, report.state) == (
        parent.job_id,
        claimed.job_id,
        "done",
    )
    assert dep_of(backend, parent.job_id, "p0").status == "pending"  # until the relay delivers
    relay()
    assert dep_of(backend, parent.job_id, "p0").status == "done"
    assert queue.get_job(parent.job_id, backend=backend).state == "pending"  # type: ignore[union-attr]


def test_acks_committing_together_settle_their_parent_once(
    jobs: SimpleNamespace, quiet_relay: None, audit_all: None
) -> None:
    """PostgreSQL (SQLite runs one writer at a time): the last two children acked in two
    transactions open at once. Neither sees the other's report, so neither could settle; the
    relay's settle runs after both commits and does, once."""
    import threading

    from django.db import connections

    from tests.conftest import need_server

    need_server("postgres")
    backend = "postgres"
    b = get_backend(backend)
    parent = jobs.Report.enqueue({"pages": 2}, backend=backend)
    work(backend, ["reports"])
    claimed = b.claim(["pages"], 2, 30)
    acks = [outcome_of(backend, c) for c in claimed]
    both_acked = threading.Barrier(2, timeout=30)
    failures: list[BaseException] = []

    def ack(one: Any) -> None:
        try:
            with transaction.atomic(using=db(backend)):
                assert b.apply_many([one])[0].ok
                both_acked.wait()  # both reports written, neither committed
        except BaseException as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=ack, args=(a,)) for a in acks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures
    assert relay().settled == 1
    assert relay().settled == 0
    settles = AuditEvent.objects.using(db(backend)).filter(action=audit.FLOW_SETTLE)
    assert list(settles.values_list("job_id", flat=True)) == [parent.job_id]
    run_to_end(backend, ["reports", "pages"])
    assert [c.completed for c in collects()] == [2]


def test_a_settle_that_fails_is_skipped_and_never_blocks_the_others(
    backend: str, jobs: SimpleNamespace, quiet_relay: None, caplog: pytest.LogCaptureFixture
) -> None:
    b = get_backend(backend)
    broken = jobs.Report.enqueue({"pages": 1}, backend=backend)
    healthy = jobs.Report.enqueue({"pages": 1}, backend=backend)
    work(backend, ["reports"])
    work(backend, ["pages"])
    real = type(b).settle_reported

    def settle(self: Any, parent_ids: Any) -> list[str]:
        if broken.job_id in parent_ids:
            raise RuntimeError("this parent cannot settle")
        return real(self, parent_ids)  # type: ignore[no-any-return]

    with pytest.MonkeyPatch.context() as m:
        m.setattr(type(b), "settle_reported", settle)
        report = relay()
    assert (report.settled, report.skipped) == (1, 1)
    assert f"parent {broken.job_id}" in caplog.text
    assert queue.get_job(healthy.job_id, backend=backend).state == "pending"  # type: ignore[union-attr]
    # Left to the flow sweeper, which settles any parent with nothing pending.
    assert queue.get_job(broken.job_id, backend=backend).state == "waiting_children"  # type: ignore[union-attr]
    assert repair(b) == {**_NOTHING, "settled": 1}


_NOTHING = {"relanded": 0, "synthesized": 0, "settled": 0, "cascaded": 0, "skipped": 0}


@pytest.fixture
def audit_all(settings: Any) -> None:
    """Report events are happy-path volume: rows only with ``AUDIT = "all"``."""
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "AUDIT": "all"}


def test_a_report_delivered_twice_is_recorded_once(
    backend: str, jobs: SimpleNamespace, quiet_relay: None, audit_all: None
) -> None:
    kids = other(backend)
    b = get_backend(backend)
    parent = jobs.Report.enqueue({"pages": 2, "child_backend": kids}, backend=backend)
    work(backend, ["reports"])
    relay()
    work(kids, ["pages"], limit=1)
    [row] = OutboxEntry.objects.using(db(kids)).filter(kind="report")
    report = report_from_body(row.body)

    assert b.deliver_reports([report]) == 1
    assert b.deliver_reports([report]) == 0
    contrary = report_from_body({**row.body, "state": "failed", "error": "late and wrong"})
    assert b.deliver_reports([contrary]) == 0
    dep = FlowDependency.objects.using(db(backend)).get(
        job_id=parent.job_id, depends_on_id=report.child_id
    )
    assert (dep.status, dep.error) == ("done", None)
    reports = AuditEvent.objects.using(db(backend)).filter(action="system.queue.flow.report")
    assert list(reports.values_list("job_id", flat=True)) == [report.child_id]


def test_the_relay_delivering_a_duplicated_row_records_and_settles_once(
    backend: str, jobs: SimpleNamespace, quiet_relay: None, audit_all: None
) -> None:
    kids = other(backend)
    parent = jobs.Report.enqueue({"pages": 2, "child_backend": kids}, backend=backend)
    work(backend, ["reports"])
    relay()
    work(kids, ["pages"])
    rows = list(OutboxEntry.objects.using(db(kids)).filter(kind="report"))
    assert len(rows) == 2
    for row in rows:  # a relay that delivered but died before deleting, as seen by the next one
        OutboxEntry.objects.using(db(kids)).create(
            kind=row.kind, backend=row.backend, job_id=row.job_id, body=row.body
        )
    sent = relay()
    assert (sent.sent, sent.skipped) == (4, 0)
    assert relay().sent == 0
    assert not OutboxEntry.objects.using(db(kids)).exists()
    events = AuditEvent.objects.using(db(backend))
    assert events.filter(action="system.queue.flow.report").count() == 2
    assert events.filter(action="system.queue.flow.settle", job_id=parent.job_id).count() == 1
    run_to_end(backend, ["reports", "pages"])
    assert len(collects()) == 1
    assert collects()[0].completed == 2


def test_each_terminal_ack_nudges_the_relay_at_once(backend: str, jobs: SimpleNamespace) -> None:
    """No sweeper runs here: only the nudge after the ack's commit can settle the parent."""
    parent = jobs.Report.enqueue({"pages": 2}, backend=backend)
    work(backend, ["reports"])
    work(backend, ["pages"], limit=1)
    assert (
        FlowDependency.objects.using(db(backend))
        .filter(job_id=parent.job_id, status="done")
        .count()
        == 1
    )
    work(backend, ["pages"])
    assert wait_until(
        lambda: queue.get_job(parent.job_id, backend=backend).state == "pending",  # type: ignore[union-attr]
        10,
    )


def test_each_terminal_ack_of_a_child_elsewhere_nudges_the_relay_at_once(
    backend: str, jobs: SimpleNamespace
) -> None:
    kids = other(backend)
    parent = jobs.Report.enqueue({"pages": 1, "child_backend": kids}, backend=backend)
    work(backend, ["reports"])
    assert wait_until(lambda: get_backend(kids).size("pages") == 1, 10)  # the enqueue relayed
    work(kids, ["pages"])
    assert wait_until(
        lambda: queue.get_job(parent.job_id, backend=backend).state == "pending",  # type: ignore[union-attr]
        10,
    )


class CountingRelay(Relay):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deliveries: list[int] = []

    def _deliver(self, db: str, kind: str, alias: str, rows: list[Any]) -> None:
        self.deliveries.append(len(rows))
        super()._deliver(db, kind, alias, rows)


def test_the_relay_pages_through_the_outbox_in_batches_of_500(
    backend: str, quiet_relay: None
) -> None:
    assert BATCH == 500
    jobs = [
        enqueueing.new_job(
            "paged",
            {"n": i},
        )
        for i in range(1_234)
    ]
    with transaction.atomic(using=db(backend)):
        outbox.write_many(
            [("enqueue", backend, j.job_id, wire.job_to_body(j)) for j in jobs], using=db(backend)
        )
    r = CountingRelay([db(backend)])
    report = r.run_once()
    assert (report.sent, report.skipped) == (1_234, 0)
    assert r.deliveries == [500, 500, 234]
    assert queue.size("paged", backend=backend) == 1_234
    assert not OutboxEntry.objects.using(db(backend)).exists()


def test_a_broken_outbox_row_is_skipped_and_never_blocks_the_rest(
    backend: str, jobs: SimpleNamespace, quiet_relay: None, caplog: pytest.LogCaptureFixture
) -> None:
    kids = other(backend)
    parent = jobs.Report.enqueue({"pages": 3, "child_backend": kids}, backend=backend)
    work(backend, ["reports"])
    relay()
    work(kids, ["pages"], limit=1)
    entries = OutboxEntry.objects.using(db(kids))
    broken = entries.create(
        kind="report", backend=backend, job_id=ids.new_id(), body={"garbage": 1}
    )
    work(kids, ["pages"])  # the two other reports come after the broken row
    assert entries.count() == 4

    report = Relay([db(kids)]).run_once()
    assert (report.sent, report.skipped) == (3, 1)
    assert f"outbox row {broken.id}" in caplog.text
    [left] = entries.all()
    assert (left.id, left.attempts) == (broken.id, 1)
    assert "garbage" in (left.last_error or "")
    info = queue.get_job(parent.job_id, backend=backend)
    assert info is not None and info.state == "pending" and info.children == {"done": 3}

    assert Relay([db(kids)]).run_once().skipped == 1  # tried again, still alone
    assert entries.get().attempts == 2


def test_a_report_for_a_parent_that_no_longer_exists_is_dropped(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    parent = jobs.Report.enqueue({"pages": 1}, backend=backend)
    work(backend, ["reports"])
    Job.objects.using(db(backend)).filter(id=parent.job_id).delete()
    FlowDependency.objects.using(db(backend)).filter(job_id=parent.job_id).delete()
    work(backend, ["pages"])
    assert relay().sent == 1
    assert not OutboxEntry.objects.using(db(backend)).exists()


def test_reports_record_the_error_of_failed_children_and_no_result(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    parent = jobs.Continue.enqueue({"pages": 2, "broken": [0]}, backend=backend)
    work(backend, ["reports"])
    work(backend, ["pages"])
    relay()
    failed, done = dep_of(backend, parent.job_id, "p0"), dep_of(backend, parent.job_id, "p1")
    assert (failed.status, failed.error, failed.result) == (
        "failed",
        "ValueError: page 0 is broken",
        None,
    )
    assert (done.status, done.error, done.result_type) == ("done", None, "application/json")
    assert audit.FLOW_SETTLE == "system.queue.flow.settle"
