"""Audit (SPEC §8, issue 4 item 8): flow enqueue, fan-out, child report, settle and cascade are
audit events — a row (at the default "operations" level) and the ``audit_event`` signal."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from django_blamequeue.backends import get_backend
from django_blamequeue.core import ids
from django_blamequeue.models import AuditEvent
from django_blamequeue.testing import capture_events

from .steps import relay, work

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

FLOW = "system.queue.flow."


def test_each_step_of_a_flow_is_an_audit_event_and_a_signal(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    db = get_backend(backend).db  # type: ignore[attr-defined]
    page = "tests.flows.page"
    with capture_events() as captured:
        parent = jobs.Report.enqueue(
            {
                "children": [  # priorities fix the order the pages run in
                    {"key": "ok", "job": page, "payload": {"page": 1}, "priority": 3},
                    {
                        "key": "bad",
                        "job": page,
                        "payload": {"page": 2, "fail": True},
                        "priority": 2,
                    },
                    {"key": "late", "job": page, "payload": {"page": 3}, "priority": 1},
                ]
            },
            backend=backend,
        )
        work(backend, ["reports"])
        for _ in range(2):
            work(backend, ["pages"], limit=1)
            relay()
        relay()  # the cascade's report
        work(backend, ["reports"])
    ok, bad, late = (ids.child_id(parent.job_id, k) for k in ("ok", "bad", "late"))
    rows = list(AuditEvent.objects.using(db).filter(action__startswith=FLOW).order_by("id"))
    assert [(e.action.removeprefix(FLOW), e.job_id) for e in rows] == [
        ("enqueue", parent.job_id),
        ("fan_out", parent.job_id),
        ("report", ok),
        ("report", bad),
        ("settle", parent.job_id),
        ("cascade", parent.job_id),
        ("report", late),
    ]
    assert rows[0].data == {"flow_id": parent.job_id, "name": "tests.flows.Report.fail"}
    assert rows[1].data == {"children": 3}
    assert [r.data for r in rows if r.action == FLOW + "report"] == [
        {"parent_id": parent.job_id, "state": s} for s in ("done", "failed", "cancelled")
    ]
    assert rows[4].data == {"children": {"done": 1, "failed": 1, "pending": 1}, "fail_fast": True}
    signalled = [(e.action, e.job_id) for e in captured.events if e.action.startswith(FLOW)]
    assert signalled == [(e.action, e.job_id) for e in rows]


def test_a_fail_fast_cascade_is_audited_with_every_child_it_cancelled(
    backend: str, jobs: SimpleNamespace, quiet_relay: None
) -> None:
    db = get_backend(backend).db  # type: ignore[attr-defined]
    page = "tests.flows.page"
    parent = jobs.Report.enqueue(
        {
            "children": [
                {"key": "bad", "job": page, "payload": {"page": 0, "fail": True}, "priority": 5},
                {"key": "a", "job": page, "payload": {"page": 1}},
                {"key": "b", "job": page, "payload": {"page": 2}},
            ]
        },
        backend=backend,
    )
    work(backend, ["reports"])
    work(backend, ["pages"], limit=1)
    relay()
    events = AuditEvent.objects.using(db)
    settle = events.get(action=FLOW + "settle")
    assert settle.data == {"children": {"failed": 1, "pending": 2}, "fail_fast": True}
    assert events.filter(action=FLOW + "cascade", job_id=parent.job_id).count() == 1
    cancelled = events.filter(action="system.queue.cancel", data__cascade=True)
    assert sorted(cancelled.values_list("job_id", flat=True)) == sorted(
        ids.child_id(parent.job_id, k) for k in ("a", "b")
    )
