"""The parts of durable workflows that need no worker: the timeline's text and bars, a
step result's encoding, the version marker's checks, the waker's pass, the job table's
wake and fence (docs/workflows.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from django_blamequeue import ErrorCode, QueueError, queue
from django_blamequeue.admin.workflows import MIN_BAR, timeline
from django_blamequeue.backends import get_backend
from django_blamequeue.backends.jobtable.wakes import Wakes
from django_blamequeue.core.records import JobInfo
from django_blamequeue.jobs import steprows
from django_blamequeue.jobs.workflow import Workflow
from django_blamequeue.jobs.workflow_ops import StepView
from django_blamequeue.management.workflows import render_timeline
from django_blamequeue.models.workflows import WorkflowEvent, WorkflowStep
from django_blamequeue.sweeper.waker import Waker

T0 = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)


def view(number: int, name: str, start: float, end: float | None, **fields: Any) -> StepView:
    values: dict[str, Any] = {
        "kind": "step",
        "status": "done" if end is not None else "waiting",
        "attempt": 1,
        "result_bytes": 0,
        "preview": "",
        "error": "",
        "wake_at": None,
        "event": "",
        "child_id": "",
        "child_backend": "",
        **fields,
    }
    return StepView(
        number=number,
        name=name,
        started_at=T0 + timedelta(seconds=start),
        finished_at=None if end is None else T0 + timedelta(seconds=end),
        **values,
    )


def test_the_timeline_places_each_bar_on_the_workflows_span() -> None:
    rows = timeline(
        [view(1, "reserve", 0, 1), view(2, "wait", 1, None, kind="event")],
        now=T0 + timedelta(seconds=100),
    )
    assert [(r.left, r.width) for r in rows] == [(0.0, 1.0), (1.0, 99.0)]
    assert rows[1].took == "99.0 s" and rows[1].finished == "–"
    instant = timeline([view(1, "a", 0, 0), view(2, "b", 0, 50)], now=T0)
    assert instant[0].width == MIN_BAR  # an instant step is still seen


def test_the_timeline_as_text_shows_results_waits_and_errors() -> None:
    info = JobInfo(
        job_id="01JZ8Q2W6V1G5M4N3B2C1X0Y9Z", backend="default", queue="orders",
        name="shop.fulfil", state="pending", priority=0, payload=None, result=None,
        error=None, traceback=None, attempts=0, max_attempts=3, progress=0,
        classification=None, trace_id=None, dedupe_key=None, flow_id=None, parent_id=None,
        created_at=T0, available_at=None, started_at=None, finished_at=None,
    )  # fmt: skip
    lines = render_timeline(
        info,
        [
            view(1, "charge", 0, 1, result_bytes=4, preview='"ok"'),
            view(2, "pay", 1, 2, status="failed", error="ValueError: declined"),
            view(3, "event:paid", 2, None, kind="event", event="paid:o-1", wake_at=T0),
        ],
    )
    text = "\n".join(lines)
    assert lines[0].startswith("workflow 01JZ8Q2W6V1G5M4N3B2C1X0Y9Z  shop.fulfil  · pending")
    assert "1. ✓ charge  step done" in text and 'result 4 B: "ok"' in text
    assert "2. ✗ pay" in text and "error: ValueError: declined" in text
    assert "waits for event paid:o-1, until 2026-12-05 09:00:00 UTC" in text
    assert render_timeline(info, [])[1] == "  no step recorded yet"


def test_a_step_result_must_be_json_and_at_most_a_mebibyte() -> None:
    assert steprows.decode(steprows.encode({"a": [1, "é"]}, "r")) == {"a": [1, "é"]}
    assert steprows.size_of(steprows.encode("é", "r")) == 4  # bytes of UTF-8, quotes included
    with pytest.raises(QueueError) as bad:
        steprows.encode({1, 2}, "the result of step 'x'")
    assert bad.value.code == ErrorCode.BAD_PAYLOAD and "step 'x'" in bad.value.message
    with pytest.raises(QueueError) as big:
        steprows.encode("x" * steprows.MAX_STEP_BYTES, "r")
    assert big.value.code == ErrorCode.PAYLOAD_TOO_LARGE


@pytest.mark.parametrize("latest", [0, -1, True, 1.5, "2"])
def test_a_version_marker_is_an_int_of_at_least_one(latest: Any) -> None:
    ctx = SimpleNamespace(backend=get_backend(None), job_id="01JZ8Q2W6V1G5M4N3B2C1X0Y9Z")
    with pytest.raises(QueueError) as bad:
        Workflow(ctx).version("charge", latest)  # type: ignore[arg-type]
    assert bad.value.code == ErrorCode.BAD_ARGUMENT


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_the_waker_forgets_events_kept_past_their_time() -> None:
    queue.send_event("paid", key="o-1", payload=1, keep=60)
    kept = queue.send_event("paid", key="o-2", payload=2, keep=3600)
    now = get_backend(None).now() + timedelta(seconds=120)
    report = Waker("default").run_once(now)
    assert (report.events, report.children, report.expired_events) == (0, 0, 1)
    assert list(WorkflowEvent.objects.values_list("id", flat=True)) == [kept]
    assert str(WorkflowStep(job_id="J", seq=0, name="charge")) == "J step 0 charge"


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_the_job_table_wakes_only_parked_jobs_and_fences_inside_a_transaction() -> None:
    engine = get_backend(None)
    assert isinstance(engine.wakes, Wakes)  # type: ignore[attr-defined]
    due = queue.enqueue("wake-me", {}).job_id
    parked = queue.enqueue("wake-me", {}, delay=3600).job_id
    assert engine.wake([due, parked, "01JZ8Q2W6V1G5M4N3B2C1X0Y9Z"]) == 1
    assert engine.wake([parked]) == 0  # due now: a wake may repeat
    with pytest.raises(RuntimeError, match="inside the step's transaction"):
        engine.fence_step(due, "no-token")
