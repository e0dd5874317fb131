"""Audit (docs/observability.md): flow enqueue, fan-out, child report, settle and cascade are
audit events — the ``audit_event`` signal always, and a row per the ``AUDIT`` level: child
reports (one per child, the flow's happy path) only with "all", the rest also with the default
"operations"."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from django_blamequeue.backends import get_backend
from django_blamequeue.core import ids
from django_blamequeue.models import AuditEvent
from django_blamequeue.testing import capture_events

from .steps import relay, work

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

FLOW = "system.queue.flow."


@pytest.mark.parametrize("level", ["all", "operations"])
def test_each_step_of_a_flow_is_an_audit_event_and_a_signal(
    backend: str, jobs: SimpleNamespace, quiet_relay: None, settings: Any, level: str
) -> None:
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "AUDIT": level}
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
    every = [
        ("enqueue", parent.job_id),
        ("fan_out", parent.job_id),
        ("report", ok),
        ("report", bad),
        ("settle", parent.job_id),
        ("cascade", parent.job_id),
        ("report", late),
    ]
    flow_events = [e for e in captured.events if e.action.startswith(FLOW)]
    assert [(e.action.removeprefix(FLOW), e.job_id) for e in flow_events] == every
    assert flow_events[0].data == {"flow_id": parent.job_id, "name": "tests.flows.Report.fail"}
    assert flow_events[1].data == {"children": 3}
    assert [e.data for e in flow_events if e.action == FLOW + "report"] == [
        {"parent_id": parent.job_id, "state": s} for s in ("done", "failed", "cancelled")
    ]
    assert flow_events[4].data == {
        "children": {"done": 1, "failed": 1, "pending": 1},
        "fail_fast": True,
    }
    rows = list(AuditEvent.objects.using(db).filter(action__startswith=FLOW).order_by("id"))
    as_rows = [(e.action.removeprefix(FLOW), e.job_id) for e in rows]
    assert as_rows == (every if level == "all" else [s for s in every if s[0] != "report"])
    assert [r.data for r in rows] == [
        e.data for e in flow_events if level == "all" or e.action != FLOW + "report"
    ]


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
