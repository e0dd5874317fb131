"""The Charts tab (docs/admin.md#charts): jobs done, retried, failed and cancelled per minute,
wait (due → started) and run time percentiles, and queue depth, over the last hour, day or
week, for one backend and optionally one queue and job name.

Read through the backend's ``buckets`` verb (one round trip), so a redis or sqs backend is
charted like the local one. The overview's sparklines read the last hour the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from django_blamequeue.admin import svg_chart
from django_blamequeue.admin.actions import _queue_name
from django_blamequeue.admin.base import VIEW, backend_or_404, require
from django_blamequeue.admin.svg_chart import Column, Series
from django_blamequeue.backends import all_backends
from django_blamequeue.backends.base import Backend
from django_blamequeue.core import timeseries
from django_blamequeue.core.timeseries import BY_LABEL, RESOLUTIONS, Point, Resolution
from django_blamequeue.core.validation import optional_text
from django_blamequeue.exceptions import QueueError

if TYPE_CHECKING:
    from django_blamequeue.admin.overview import Console

#: Seconds between live refreshes of a chart of each range (its buckets' size, at most 60).
REFRESH = {"hour": 10, "day": 60, "week": 60}
COUNTS = (
    Series("done", "done", "#2f8f46"),
    Series("retried", "retried", "#e8a317"),
    Series("failed", "failed", "#c8372d"),
    Series("cancelled", "cancelled", "#6e7076"),
)
PERCENTILES = (Series("p50", "p50", "#3b6fb6"), Series("p95", "p95", "#8e5fb5", dash="5 3"))
DEPTH = (Series("depth", "pending jobs", "#3b6fb6"),)


def read(
    backend: Backend,
    resolution: Resolution,
    *,
    queue: str | None = None,
    name: str | None = None,
    end: datetime | None = None,
) -> tuple[datetime, list[timeseries.Bucket]]:
    """The buckets a chart of ``resolution`` ending now (the engine's clock) shows."""
    b = backend
    end = end or b.resilience.call(b.now, idempotent=True)
    since = timeseries.since(resolution, end)
    until = timeseries.floor(end, resolution.step) + timedelta(seconds=resolution.step)
    found = b.resilience.call(
        lambda: b.buckets(resolution.step, since, until, queue=queue, name=name), idempotent=True
    )
    return end, found


def charts(points: Sequence[Point], resolution: Resolution, depth: bool) -> list[SafeString]:
    per_minute = 60 / resolution.step
    time_fmt = "%H:%M" if resolution.step < 3600 else "%a %H:%M"
    if resolution.label == "day":
        time_fmt = "%H:%M"
    drawn = [
        svg_chart.bars(
            "throughput",
            "Jobs per minute",
            COUNTS,
            [
                Column(
                    p.start,
                    tuple(
                        getattr(p, s.key) * per_minute if getattr(p, s.key) else None
                        for s in COUNTS
                    ),
                )
                for p in points
            ],
            fmt=svg_chart.count,
            time_fmt=time_fmt,
        ),
        svg_chart.lines(
            "wait",
            "Wait: due → started",
            PERCENTILES,
            [Column(p.start, (p.wait_p(0.5), p.wait_p(0.95))) for p in points],
            fmt=svg_chart.seconds,
            time_fmt=time_fmt,
        ),
        svg_chart.lines(
            "run",
            "Run time: started → acked",
            PERCENTILES,
            [Column(p.start, (p.run_p(0.5), p.run_p(0.95))) for p in points],
            fmt=svg_chart.seconds,
            time_fmt=time_fmt,
        ),
    ]
    if depth:
        drawn.append(
            svg_chart.lines(
                "depth",
                "Queue depth (pending, delayed included; sampled each minute)",
                DEPTH,
                [
                    Column(p.start, (float(p.depth),) if p.depth is not None else (None,))
                    for p in points
                ],
                fmt=svg_chart.count,
                time_fmt=time_fmt,
            )
        )
    return drawn


def totals(points: Sequence[Point]) -> dict[str, Any]:
    wait: tuple[int, ...] = ()
    run: tuple[int, ...] = ()
    for p in points:
        wait, run = timeseries.add(wait, p.wait), timeseries.add(run, p.run)
    p95w, p95r = timeseries.percentile(wait, 0.95), timeseries.percentile(run, 0.95)
    return {
        "done": sum(p.done for p in points),
        "retried": sum(p.retried for p in points),
        "failed": sum(p.failed for p in points),
        "cancelled": sum(p.cancelled for p in points),
        "wait_p95": svg_chart.seconds(p95w) if p95w is not None else "–",
        "run_p95": svg_chart.seconds(p95r) if p95r is not None else "–",
    }


def charts_page(request: HttpRequest, console: Console) -> HttpResponse:
    require(request, VIEW)
    backend = backend_or_404(request.GET.get("backend"))
    resolution = BY_LABEL.get(request.GET.get("range") or "hour", RESOLUTIONS[0])
    q = request.GET.get("queue") or None
    if q is not None and _queue_name(q) is None:
        return HttpResponseBadRequest("not a queue name")
    try:
        name = optional_text(request.GET.get("name") or None, "name", 255)
    except QueueError:
        return HttpResponseBadRequest("not a job name")
    error = None
    try:
        end, found = read(backend, resolution, queue=q, name=name)
        _, recent = read(backend, RESOLUTIONS[0], end=end) if (q or name) else (end, found)
    except QueueError as exc:
        error, end, found, recent = str(exc), datetime.now().astimezone(), [], []
    points = timeseries.series(found, resolution, end)

    def link(**change: str | None) -> str:
        query = {"backend": backend.alias, "queue": q, "name": name, "range": resolution.label}
        kept = {k: v for k, v in {**query, **change}.items() if v is not None}
        return reverse("admin:django_blamequeue_job_charts") + "?" + urlencode(kept)

    return console.render(
        request,
        "charts.html",
        "charts",
        "Charts" + (f" of {q}" if q else "") + (f" · {name}" if name else ""),
        backend=backend.alias,
        backends=[b.alias for b in all_backends()],
        queue=q or "",
        name=name or "",
        range=resolution.label,
        ranges=[(r.label, link(range=r.label), r is resolution) for r in RESOLUTIONS],
        queues=sorted({b.queue for b in recent}),
        names=sorted({b.name for b in recent if b.name and (q is None or b.queue == q)}),
        charts=charts(points, resolution, depth=name is None or q is not None),
        totals=totals(points),
        step=resolution.step,
        refresh=REFRESH[resolution.label],
        error=error,
        clear_url=link(queue=None, name=None),
    )


def sparklines(backend: Backend) -> dict[str, SafeString]:
    """Each queue's last hour as a sparkline (done up, failed down), by queue; {} when the
    backend does not answer (the overview says so already)."""
    minute = RESOLUTIONS[0]
    try:
        end, found = read(backend, minute)
    except QueueError:
        return {}
    by_queue: dict[str, list[timeseries.Bucket]] = {}
    for b in found:
        by_queue.setdefault(b.queue, []).append(b)
    drawn = {}
    for q, buckets in by_queue.items():
        points = timeseries.series(buckets, minute, end)
        done, failed = [p.done for p in points], [p.failed for p in points]
        title = f"last hour: {sum(done):,} done, {sum(failed):,} failed"
        drawn[q] = svg_chart.sparkline(done, failed, title)
    return drawn
