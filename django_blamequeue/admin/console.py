"""The operator's screens beside the job list: queue overview, DLQ, retry all, purge, flows.

They read and act through the ``queue`` facade and the backends' verbs, never the tables, so a
remote backend's queues show up here as soon as it implements the verbs. Every screen needs
the view permission; every action its own permission (403 otherwise), POST and CSRF.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods, require_POST

from ..api import queue
from ..backends import all_backends
from ..backends.base import Backend
from ..exceptions import QueueError
from ..records import QueueStats
from ..validation import identifier, queue_name
from . import display, operations
from .base import PURGE, RETRY, VIEW, VIEW_AUDIT, allowed, backend_or_404, require
from .flows import flow_page

if TYPE_CHECKING:
    from .jobs import JobAdmin

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


def _url(name: str, **query: Any) -> str:
    target = reverse(f"admin:django_blamequeue_job_{name}")
    query = {k: v for k, v in query.items() if v is not None}
    return f"{target}?{urlencode(query)}" if query else target


def job_list_url(backend: str, **filters: Any) -> str:
    query = {"backend": backend, **{k: v for k, v in filters.items() if v is not None}}
    return reverse("admin:django_blamequeue_job_changelist") + "?" + urlencode(query)


def stats_of(backend: Backend) -> list[QueueStats]:
    return backend.resilience.call(backend.stats, idempotent=True)


def breaker_of(backend: Backend) -> str:
    return backend.resilience.breaker.state


def _int(value: str | None, default: int = 0) -> int:
    try:
        return max(0, int(value or default))
    except ValueError:  # not digits, or more of them than int() reads
        return default


def _job_ids(values: list[str]) -> list[str]:
    """The strings of a form that can be job ids; others name no job, so they are dropped."""
    found = []
    for value in values:
        try:
            found.append(identifier(value))
        except QueueError:
            continue
    return found


def _queue_name(value: str | None) -> str | None:
    """A queue name from a request, or None if it is not one (the view answers 400)."""
    try:
        return queue_name(value)
    except QueueError:
        return None


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
            }
            backends.append(entry)
            try:
                stats = stats_of(b)
            except QueueError as exc:
                entry["error"] = str(exc)
                entry["breaker"] = breaker_of(b)
                continue
            rows += [self._row(request, b, st, entry["breaker"]) for st in stats]
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
        )

    def _row(self, request: HttpRequest, b: Backend, st: QueueStats, breaker: str) -> OverviewRow:
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
        jobs = queue.dlq_list(
            q, limit=DLQ_PER_PAGE, offset=(page - 1) * DLQ_PER_PAGE, backend=backend.alias
        )

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

    @staticmethod
    def _back_to_dlq(backend: str, q: str) -> HttpResponse:
        return HttpResponseRedirect(_url("dlq", backend=backend, queue=q))

    def dlq_retry(self, request: HttpRequest) -> HttpResponse:
        return _dlq_retry(request)

    def dlq_retry_all(self, request: HttpRequest) -> HttpResponse:
        return _dlq_retry_all(request, self)

    # -- purge ---------------------------------------------------------------------------
    def purge(self, request: HttpRequest) -> HttpResponse:
        return _purge(request, self)

    # -- flows ---------------------------------------------------------------------------
    def flow(self, request: HttpRequest, flow_id: str) -> HttpResponse:

        require(request, VIEW)
        return flow_page(self, request, flow_id)


def _from_request(request: HttpRequest) -> tuple[Backend, str] | None:
    data = request.POST if request.method == "POST" else request.GET
    backend = backend_or_404(data.get("backend"))
    q = _queue_name(data.get("queue"))
    return None if q is None else (backend, q)


@require_POST
def _dlq_retry(request: HttpRequest) -> HttpResponse:
    require(request, RETRY)
    target = _from_request(request)
    if target is None:
        return HttpResponseBadRequest("not a queue name")
    backend, q = target
    ids = _job_ids(request.POST.getlist("job_id")[: operations.MAX_SELECTED])
    found = [queue.get_job(i, backend=backend.alias) for i in ids]
    rows = [(j.job_id, j.queue) for j in found if j is not None]
    if not rows:
        messages.warning(request, "No job selected: nothing retried.")
        return Console._back_to_dlq(backend.alias, q)
    n = operations.retry(request, backend, rows)
    messages.success(request, f"{n} job(s) back to pending.")
    if request.POST.get("next") == "job" and len(rows) == 1:
        return HttpResponseRedirect(
            reverse("admin:django_blamequeue_job_change", args=[rows[0][0]])
            + "?"
            + urlencode({"backend": backend.alias})
        )
    return Console._back_to_dlq(backend.alias, q)


@require_http_methods(["GET", "POST"])
def _dlq_retry_all(request: HttpRequest, console: Console) -> HttpResponse:
    require(request, RETRY)
    target = _from_request(request)
    if target is None:
        return HttpResponseBadRequest("not a queue name")
    backend, q = target
    if request.method == "POST":
        confirmed = _int(request.POST.get("count"))
        n = operations.retry_all(request, backend, q, confirmed)
        note = "" if n == confirmed else f" (the confirmation said {confirmed})"
        messages.success(request, f"Retried {n} job(s) from the DLQ of {q}{note}.")
        return Console._back_to_dlq(backend.alias, q)
    count = queue.dlq_size(q, backend=backend.alias)
    return console.render(
        request,
        "confirm.html",
        "dlq",
        f"Retry all dead letters of {q}?",
        count=count,
        noun="failed job",
        backend=backend.alias,
        queue=q,
        question=f"Put all {count:,} failed job(s) of queue “{q}” on backend “{backend.alias}” "
        "back to pending, each with a fresh attempt budget?",
        action_url=_url("dlq_retry_all"),
        button=f"Yes, retry {count:,} job(s)",
        cancel_url=_url("dlq", backend=backend.alias, queue=q),
        danger=False,
    )


@require_http_methods(["GET", "POST"])
def _purge(request: HttpRequest, console: Console) -> HttpResponse:
    require(request, PURGE)
    target = _from_request(request)
    if target is None:
        return HttpResponseBadRequest("not a queue name")
    backend, q = target
    if request.method == "POST":
        confirmed = _int(request.POST.get("count"))
        n = operations.purge(request, backend, q, confirmed)
        note = "" if n == confirmed else f" (the confirmation said {confirmed})"
        messages.success(request, f"Purged {n} waiting job(s) from {q}{note}.")
        return HttpResponseRedirect(_url("overview"))
    counts = next((st.counts for st in stats_of(backend) if st.queue == q), {})
    pending, blocked = counts.get("pending", 0), counts.get("blocked", 0)
    count = pending + blocked
    return console.render(
        request,
        "confirm.html",
        "overview",
        f"Purge queue {q}?",
        count=count,
        noun="waiting job",
        backend=backend.alias,
        queue=q,
        question=f"Delete all {count:,} waiting job(s) of queue “{q}” on backend "
        f"“{backend.alias}” ({pending:,} pending, {blocked:,} blocked)? Running and finished "
        "jobs are kept. Jobs that arrive before you confirm are waiting too, and are deleted "
        "with them: the count after the purge says how many went. This cannot be undone.",
        action_url=_url("purge"),
        button=f"Yes, delete {count:,} job(s)",
        cancel_url=_url("overview"),
        danger=True,
    )
