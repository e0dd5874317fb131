"""The operator's screens beside the job list: queue overview, DLQ, retry all, purge, flows.

They read and act through the ``queue`` facade and the backends' verbs, never the tables, so a
remote backend's queues show up here as soon as it implements the verbs. Every screen needs
the view permission; every action its own permission (403 otherwise), POST and CSRF.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.template.response import TemplateResponse
from django.urls import reverse

from django_blamequeue.admin import actions, charts, control, display, sealed
from django_blamequeue.admin.actions import (
    _int,
    _queue_name,
    _url,
    breaker_of,
    job_list_url,
    stats_of,
)
from django_blamequeue.admin.base import (
    PURGE,
    RETRY,
    VIEW,
    VIEW_AUDIT,
    allowed,
    backend_or_404,
    require,
)
from django_blamequeue.admin.flows import flow_page
from django_blamequeue.api import queue
from django_blamequeue.backends import all_backends
from django_blamequeue.backends.base import Backend
from django_blamequeue.backends.replicas import read_database
from django_blamequeue.core.controls import QueueControl
from django_blamequeue.core.records import QueueStats
from django_blamequeue.exceptions import QueueError
from django_blamequeue.models import Job
from django_blamequeue.worker import fleet

if TYPE_CHECKING:
    from django_blamequeue.admin.jobs import JobAdmin

DLQ_PER_PAGE = 50
OVERVIEW_STATES = (
    "pending",
    "blocked",
    "inflight",
    "waiting_children",
    "done",
    "failed",
    "cancelled",
)


@dataclass(frozen=True, slots=True)
class Cell:
    state: str
    count: int
    url: str | None


@dataclass(frozen=True, slots=True)
class OverviewRow:
    backend: str
    protocol: str
    breaker: str
    queue: str
    cells: list[Cell]
    oldest_pending: str
    done_last_hour: int | None
    failed_last_hour: int | None
    failed: int
    waiting: int
    dlq_url: str | None
    purge_url: str | None
    paused: bool = False
    reason: str = ""
    spark: str = ""  # the last hour as a sparkline (done up, failed down)
    charts_url: str = ""
    limits: str = ""  # the limits in force, described; "" for none
    source: str = ""  # live | settings
    limits_url: str = ""


def _live_workers(b: Backend) -> int | None:
    """How many workers serve ``b`` now (None: its registry could not be read)."""
    try:
        return sum(1 for w in fleet.workers(b) if w.live)
    except Exception:  # an unreachable registry must not take the overview down
        return None


class Console:
    """The console's views, bound to the job model admin (for its site and options)."""

    def __init__(self, model_admin: JobAdmin) -> None:
        self.model_admin = model_admin

    @staticmethod
    def tabs(request: HttpRequest, current: str) -> list[tuple[str, str, bool]]:
        tabs = [
            ("Overview", _url("overview"), current == "overview"),
            ("Jobs", reverse("admin:django_blamequeue_job_changelist"), current == "jobs"),
            ("Dead letters", _url("dlq"), current == "dlq"),
            ("Charts", _url("charts"), current == "charts"),
            ("Workers", _url("workers"), current == "workers"),
        ]
        if allowed(request, "django_blamequeue.view_schedule"):
            tabs.append(
                (
                    "Schedules",
                    reverse("admin:django_blamequeue_schedule_changelist"),
                    current == "schedules",
                )
            )
        if allowed(request, VIEW_AUDIT):
            tabs.append(
                (
                    "Audit log",
                    reverse("admin:django_blamequeue_auditevent_changelist"),
                    current == "audit",
                )
            )
        return tabs

    def render(
        self, request: HttpRequest, template: str, tab: str, title: str, **context: Any
    ) -> TemplateResponse:
        context = {
            **self.model_admin.admin_site.each_context(request),
            "opts": self.model_admin.opts,
            "title": title,
            "tabs": self.tabs(request, tab),
            **context,
        }
        return TemplateResponse(request, f"admin/django_blamequeue/{template}", context)

    # -- overview ------------------------------------------------------------------------
    def overview(self, request: HttpRequest) -> HttpResponse:
        require(request, VIEW)
        rows: list[OverviewRow] = []
        backends: list[dict[str, Any]] = []
        for b in all_backends():
            entry: dict[str, Any] = {
                "name": b.alias,
                "protocol": b.protocol,
                "breaker": breaker_of(b),
                "error": None,
                "database": b.database,
                # the replica the job list reads, when the project's routers name one
                "reads": read_database(Job, b.database) if b.database else None,
                "workers": _live_workers(b),
            }
            backends.append(entry)
            try:
                stats = stats_of(b)
                controls = {c.queue: c for c in queue.controls(backend=b.alias)}
            except QueueError as exc:
                entry["error"] = str(exc)
                entry["breaker"] = breaker_of(b)
                continue
            listed = {st.queue for st in stats}
            stats += [
                QueueStats(backend=b.alias, queue=q) for q in sorted(controls) if q not in listed
            ]
            sparks = charts.sparklines(b)
            rows += [
                self._row(request, b, st, entry["breaker"], controls.get(st.queue), sparks)
                for st in stats
            ]
        headers = [s.replace("_", " ") for s in OVERVIEW_STATES]
        return self.render(
            request,
            "overview.html",
            "overview",
            "Queues",
            rows=rows,
            backends=backends,
            headers=headers,
            styles=display.STATE_STYLES,
            can_pause=allowed(request, control.PAUSE),
            pause_url=_url("pause"),
            resume_url=_url("resume"),
            workers_url=_url("workers"),
            paused=sum(1 for r in rows if r.paused),
        )

    def _row(
        self,
        request: HttpRequest,
        b: Backend,
        st: QueueStats,
        breaker: str,
        ctl: QueueControl | None = None,
        sparks: dict[str, Any] | None = None,
    ) -> OverviewRow:
        listable = b.database is not None
        cells = [
            Cell(
                s,
                st.counts.get(s, 0),
                job_list_url(b.alias, queue=st.queue, state__exact=s) if listable else None,
            )
            for s in OVERVIEW_STATES
        ]
        failed = st.counts.get("failed", 0)
        waiting = st.counts.get("pending", 0) + st.counts.get("blocked", 0)
        return OverviewRow(
            backend=b.alias,
            protocol=b.protocol,
            breaker=breaker,
            queue=st.queue,
            cells=cells,
            oldest_pending=display.age(st.oldest_pending_age),
            done_last_hour=st.done_last_hour,
            failed_last_hour=st.failed_last_hour,
            failed=failed,
            waiting=waiting,
            dlq_url=_url("dlq", backend=b.alias, queue=st.queue)
            if failed and b.supports_dlq_listing
            else None,
            purge_url=_url("purge", backend=b.alias, queue=st.queue)
            if waiting and allowed(request, PURGE)
            else None,
            paused=bool(ctl and ctl.paused),
            reason=ctl.reason if ctl else "",
            limits="" if ctl is None or ctl.limits.empty else ctl.limits.describe(),
            source=ctl.source if ctl else "",
            limits_url=_url("limits", backend=b.alias, queue=st.queue),
            spark=(sparks or {}).get(st.queue, ""),
            charts_url=_url("charts", backend=b.alias, queue=st.queue),
        )

    # -- dead-letter queue ---------------------------------------------------------------
    def dlq(self, request: HttpRequest) -> HttpResponse:
        require(request, VIEW)
        backend = backend_or_404(request.GET.get("backend"))
        name = request.GET.get("queue")
        if not name:
            return self._dlq_index(request)
        q = _queue_name(name)
        if q is None:
            return HttpResponseBadRequest("not a queue name")
        if not backend.supports_dlq_listing:
            return self.render(
                request,
                "dlq.html",
                "dlq",
                f"Dead letters of {q}",
                backend=backend.alias,
                queue=q,
                unsupported=True,
            )
        total = queue.dlq_size(q, backend=backend.alias)
        last = max(1, -(-total // DLQ_PER_PAGE))
        page = min(max(1, _int(request.GET.get("page"), 1)), last)  # ?page=10**20: the last
        found = queue.dlq_list(
            q, limit=DLQ_PER_PAGE, offset=(page - 1) * DLQ_PER_PAGE, backend=backend.alias
        )
        jobs = [sealed.listed(j) for j in found]

        def page_url(n: int) -> str:
            return _url("dlq", backend=backend.alias, queue=q, page=n)

        return self.render(
            request,
            "dlq.html",
            "dlq",
            f"Dead letters of {q}",
            backend=backend.alias,
            queue=q,
            total=total,
            page=page,
            last_page=last,
            jobs=[(j, display.relative(j.finished_at), display.short(j.error)) for j in jobs],
            can_retry=allowed(request, RETRY),
            retry_url=_url("dlq_retry"),
            retry_all_url=_url("dlq_retry_all", backend=backend.alias, queue=q),
            prev_url=page_url(page - 1) if page > 1 else None,
            next_url=page_url(page + 1) if page < last else None,
            list_url=job_list_url(backend.alias, queue=q, state__exact="failed")
            if backend.database is not None
            else None,
        )

    def _dlq_index(self, request: HttpRequest) -> HttpResponse:
        queues = []
        for b in all_backends():
            try:
                stats = stats_of(b)
            except QueueError as exc:
                messages.warning(request, f"backend {b.alias}: {exc}")
                continue
            queues += [
                (
                    b.alias,
                    st.queue,
                    st.counts.get("failed", 0),
                    _url("dlq", backend=b.alias, queue=st.queue),
                )
                for st in stats
                if st.counts.get("failed", 0)
            ]
        return self.render(request, "dlq_index.html", "dlq", "Dead letters", queues=queues)

    def dlq_retry(self, request: HttpRequest) -> HttpResponse:
        return actions.dlq_retry(request)

    def dlq_retry_all(self, request: HttpRequest) -> HttpResponse:
        return actions.dlq_retry_all(request, self)

    # -- purge ---------------------------------------------------------------------------
    def purge(self, request: HttpRequest) -> HttpResponse:
        return actions.purge(request, self)

    # -- the control plane ---------------------------------------------------------------
    def pause(self, request: HttpRequest) -> HttpResponse:
        return control.pause(request)

    def resume(self, request: HttpRequest) -> HttpResponse:
        return control.resume(request)

    def limits(self, request: HttpRequest) -> HttpResponse:
        return control.limits_page(request, self)

    def workers(self, request: HttpRequest) -> HttpResponse:
        return control.workers_page(request, self)

    # -- charts --------------------------------------------------------------------------
    def charts(self, request: HttpRequest) -> HttpResponse:
        return charts.charts_page(request, self)

    # -- flows ---------------------------------------------------------------------------
    def flow(self, request: HttpRequest, flow_id: str) -> HttpResponse:

        require(request, VIEW)
        return flow_page(self, request, flow_id)
