"""A durable workflow on its job page: the timeline of its steps, timers and waits (a bar per
step over the workflow's span, so a long wait is seen at a glance), re-run from step N and
send an event, each audited with the user (docs/workflows.md)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from django_blamequeue.admin import display
from django_blamequeue.admin.base import RETRY, allowed, require
from django_blamequeue.api import queue
from django_blamequeue.core.records import JobInfo
from django_blamequeue.core.states import TERMINAL
from django_blamequeue.exceptions import QueueError
from django_blamequeue.jobs import registry
from django_blamequeue.jobs.workflow_ops import StepView

MARKS = {"done": "✓", "failed": "✗", "waiting": "⋯", "timed_out": "⌛", "raised": "✗"}
#: A bar never narrower than this (per cent), so an instant step is still seen.
MIN_BAR = 0.6


def _url(name: str, *args: Any, **query: Any) -> str:
    target = reverse(f"admin:django_blamequeue_job_{name}", args=args)
    return f"{target}?{urlencode(query)}" if query else target


@dataclass(frozen=True, slots=True)
class Row:
    step: StepView
    mark: str
    started: str
    finished: str
    took: str
    left: float
    width: float
    child_url: str | None


def context(request: HttpRequest, info: JobInfo) -> dict[str, Any] | None:
    """What the job page shows of a durable workflow; None for any other job."""
    definition = registry.get(info.name)
    if definition is not None and not definition.durable:
        return None  # a plain job: no query (a name this process does not know may be one)
    steps = queue.workflow_steps(info.job_id, info.backend)
    if not steps and definition is None:
        return None
    ended = info.state in TERMINAL
    waiting = next((s for s in steps if s.kind == "event" and s.status == "waiting"), None)
    return {
        "rows": timeline(steps, timezone.now()),
        "can_rerun": ended and allowed(request, RETRY),
        "can_send": allowed(request, RETRY),
        "rerun_url": _url("workflow_rerun", info.job_id),
        "send_url": _url("workflow_send_event", info.job_id),
        "last_step": len(steps) + 1,
        "event_name": waiting.event.split(":", 1)[0] if waiting else "",
        "event_key": waiting.event.split(":", 1)[1] if waiting else "",
    }


def timeline(steps: Sequence[StepView], now: datetime) -> list[Row]:
    """One row per step with its bar placed on the span from the first start to the last
    end (or now, while something waits)."""
    if not steps:
        return []
    start = min(s.started_at for s in steps)
    end = max([s.finished_at or now for s in steps] + [start])
    total = max((end - start).total_seconds(), 1e-3)
    rows = []
    for s in steps:
        stop = s.finished_at or now
        left = 100 * (s.started_at - start).total_seconds() / total
        width = max(MIN_BAR, 100 * (stop - s.started_at).total_seconds() / total)
        rows.append(
            Row(
                step=s,
                mark=MARKS.get(s.status, "?"),
                started=display.relative(s.started_at, now),
                finished=display.relative(s.finished_at, now) if s.finished_at else "–",
                took=_took((stop - s.started_at).total_seconds()),
                left=round(min(left, 100 - MIN_BAR), 2),
                width=round(min(width, 100 - min(left, 100 - MIN_BAR)), 2),
                child_url=_url("change", s.child_id, backend=s.child_backend)
                if s.child_id
                else None,
            )
        )
    return rows


def _took(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.1f} s"


@require_POST
def rerun(request: HttpRequest, object_id: str) -> HttpResponse:
    require(request, RETRY)
    backend = request.POST.get("backend") or None
    try:
        from_step = int(request.POST.get("from_step", ""))
    except ValueError:
        messages.error(request, "Choose the step to re-run from.")
        return HttpResponseRedirect(_url("change", object_id, backend=backend or ""))
    try:
        new = queue.rerun_workflow(
            object_id, from_step, backend=backend, user=request.user.get_username()
        )
    except QueueError as exc:
        messages.error(request, exc.message)
        return HttpResponseRedirect(_url("change", object_id, backend=backend or ""))
    messages.success(request, f"Re-running {object_id} from step {from_step} as job {new.job_id}.")
    return HttpResponseRedirect(_url("change", new.job_id, backend=new.backend))


@require_POST
def send_event(request: HttpRequest, object_id: str) -> HttpResponse:
    require(request, RETRY)
    backend = request.POST.get("backend") or None
    back = _url("change", object_id, backend=backend or "")
    try:
        payload = json.loads(request.POST.get("payload") or "null")
    except ValueError as exc:
        messages.error(request, f"The payload is not JSON: {exc}")
        return HttpResponseRedirect(back)
    name, key = request.POST.get("name", ""), request.POST.get("key", "")
    try:
        queue.send_event(
            name, key=key, payload=payload, backend=backend, user=request.user.get_username()
        )
    except QueueError as exc:
        messages.error(request, exc.message)
        return HttpResponseRedirect(back)
    messages.success(request, f"Sent event {name!r}" + (f" with key {key!r}." if key else "."))
    return HttpResponseRedirect(back)
