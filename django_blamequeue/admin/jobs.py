"""The job list and the job page.

The list reads the ``blamequeue_job`` table of one local backend's database: newest first
(the primary key is time-sortable, so that is an index scan), counted only up to a cap,
searched by exact id / dedupe key / trace id, filtered without ``SELECT DISTINCT``. The job
page reads through ``queue.get_job`` and so works for any backend.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from django_blamequeue import audit
from django_blamequeue.admin import (
    attempts,
    bulk,
    display,
    operations,
    provenance,
    sealed,
    search,
    workflows,
)
from django_blamequeue.admin.base import (
    CANCEL,
    PURGE,
    RETRY,
    VIEW,
    ReadOnlyAdmin,
    allowed,
    backend_or_404,
    listing_database,
    local_backends,
    matching,
    require,
    selected_backend,
)
from django_blamequeue.admin.filters import (
    BackendFilter,
    ClassificationFilter,
    NameFilter,
    QueueFilter,
)
from django_blamequeue.admin.overview import Console
from django_blamequeue.admin.provenance import AboutFilter, OriginFilter
from django_blamequeue.api import queue
from django_blamequeue.core.records import JobInfo
from django_blamequeue.core.states import TERMINAL, reason_note
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.models import AuditEvent, Job, traced

#: Columns never loaded for a list page (payloads may be up to 1 MiB each).
HEAVY_FIELDS = ("payload", "result", "traceback", "lease_token", "checkpoint")
AUDIT_TRAIL_ROWS = 200
PROTECTED_ACTIONS = {
    "retry_selected": RETRY,
    "cancel_selected": CANCEL,
    "delete_selected_jobs": PURGE,
    "move_selected": bulk.MOVE,
    "reprioritize_selected": bulk.REPRIORITIZE,
}


def url(name: str, *args: Any, **query: Any) -> str:
    target = reverse(f"admin:django_blamequeue_job_{name}", args=args)
    query = {k: v for k, v in query.items() if v is not None}
    return f"{target}?{urlencode(query)}" if query else target


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "name",
        "queue",
        "state_badge",
        "progress_bar",
        "attempts_of",
        "created",
        "when",
        "flow_link",
    )
    list_filter = (
        BackendFilter,
        "state",
        QueueFilter,
        NameFilter,
        ClassificationFilter,
        AboutFilter,
        OriginFilter,
        *search.SEARCH_FILTERS,
    )
    url_filters = tuple(sorted(search.ALLOWED_PARAMS))  # the bulk actions' list, the same
    search_fields = ("id", "dedupe_key", "trace_id")
    search_help_text = (
        "Exact job id, trace id, about key (app.model:pk) or dedupe key; or part of the "
        "call site that enqueued it (views.py:88)."
    )
    ordering = ("-id",)
    sortable_by = ("id",)
    actions = (
        "retry_selected",
        "cancel_selected",
        "delete_selected_jobs",
        "move_selected",
        "reprioritize_selected",
    )
    actions_selection_counter = False  # no "select all N": N is capped, see CappedPaginator
    change_list_template = "admin/django_blamequeue/job/change_list.html"

    class Media:
        css = {"all": ("django_blamequeue/admin.css",)}

    # -- the list ------------------------------------------------------------------------
    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return self.get_queryset_for(selected_backend(request))

    def get_queryset_for(self, alias: str) -> QuerySet[Job]:
        """The job list's rows of one local backend: read from its replica when the
        project's routers name one (docs/scaling.md), else from its database."""
        return Job.objects.using(listing_database(alias, Job)).defer(*HEAVY_FIELDS)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        """Exact matches, tried in turn: job id, trace id (both indexed), then dedupe key.

        Exact, not Django's ``iexact`` (which defeats the indexes); in turn, because one ``OR``
        of the three makes PostgreSQL scan the whole table for every search.
        """
        term = search_term.strip()
        if not term:
            return queryset, False
        for found in (queryset.filter(id=term), queryset.filter(traced(term))):
            if found.exists():
                return found, False
        about = provenance.about_search(queryset, term)
        if about is not None:
            return about, False
        held = queryset.filter(unique_key=term, unique_states__isnull=False)  # bq_job_unique
        if held.exists():
            return held, False
        return matching(queryset, dedupe_key=term), False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if request.method == "POST" and request.POST.get("action") in PROTECTED_ACTIONS:
            require(request, PROTECTED_ACTIONS[request.POST["action"]])
        backend = selected_backend(request)
        context = {
            "tabs": Console.tabs(request, "jobs"),
            "backend_alias": backend,
            "bulk_verbs": bulk.permitted(request),
            "bulk_url": url("bulk"),
            "bulk_filters": request.GET.urlencode(),
            "title": f"Jobs on backend {backend}",
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    @admin.display(description="state", ordering=None)
    def state_badge(self, job: Job) -> str:
        return display.state_badge(job.state)

    @admin.display(description="progress")
    def progress_bar(self, job: Job) -> str:
        return display.progress_bar(job.progress)

    @admin.display(description="attempts")
    def attempts_of(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    @admin.display(description="created")
    def created(self, job: Job) -> str:
        return display.relative(job.created_at)

    @admin.display(description="when")
    def when(self, job: Job) -> str:
        """The time that matters for the state: due, started, or finished."""
        now = timezone.now()
        if job.state in TERMINAL:
            text = format_html("finished {}", display.relative(job.finished_at, now))
        elif job.state == "inflight":
            text = format_html("started {}", display.relative(job.started_at, now))
        elif job.state == "pending" and job.available_at > now:
            text = format_html("due {}", display.relative(job.available_at, now))
        elif job.state == "pending":
            text = format_html("waiting {}", display.waited(job.available_at, now))
        else:
            text = format_html("since {}", display.relative(job.updated_at, now))
        return format_html('<span class="bq-when">{}</span>', text)

    @admin.display(description="flow")
    def flow_link(self, job: Job) -> str:
        if not job.flow_id:
            return ""
        label = job.flow_key or job.flow_id
        return format_html(
            '<a href="{}">{}</a>',
            url("flow", job.flow_id, backend=selected_backend_of(job)),
            display.short(label, 30),
        )

    # -- actions -------------------------------------------------------------------------
    def has_retry_permission(self, request: HttpRequest) -> bool:
        return allowed(request, RETRY)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return allowed(request, CANCEL)

    def _selected(self, request: HttpRequest, jobs: QuerySet[Job]) -> list[tuple[str, str]] | None:
        rows = list(jobs.order_by("-id").values_list("id", "queue")[: operations.MAX_SELECTED + 1])
        if len(rows) > operations.MAX_SELECTED:
            self.message_user(
                request,
                f"Select at most {operations.MAX_SELECTED} jobs; for a "
                "whole queue use the DLQ screen's retry all, or purge.",
                messages.ERROR,
            )
            return None
        return [(str(i), str(q)) for i, q in rows]

    @admin.action(description="Retry selected jobs from the DLQ", permissions=["retry"])
    def retry_selected(self, request: HttpRequest, jobs: QuerySet[Job]) -> None:
        rows = self._selected(request, jobs.filter(state="failed"))
        if rows is None:
            return
        backend = backend_or_404(selected_backend(request))
        n = operations.retry(request, backend, rows)
        self.message_user(request, f"{n} job(s) back to pending.", messages.SUCCESS)

    @admin.action(description="Cancel selected jobs", permissions=["cancel"])
    def cancel_selected(self, request: HttpRequest, jobs: QuerySet[Job]) -> None:
        rows = self._selected(request, jobs)
        if rows is None:
            return
        backend = backend_or_404(selected_backend(request))
        n = operations.cancel(request, backend, rows)
        self.message_user(request, f"{n} job(s) cancelled or told to stop.", messages.SUCCESS)

    def has_purge_permission(self, request: HttpRequest) -> bool:
        return allowed(request, PURGE)

    def has_move_permission(self, request: HttpRequest) -> bool:
        return allowed(request, bulk.MOVE)

    def has_reprioritize_permission(self, request: HttpRequest) -> bool:
        return allowed(request, bulk.REPRIORITIZE)

    def _confirm_checked(self, request: HttpRequest, jobs: QuerySet[Job], verb: str) -> Any:
        """The checked rows go to the bulk confirmation page (it asks for a queue or a
        priority where the action needs one)."""
        rows = self._selected(request, jobs)
        if rows is None:
            return None
        query = QueryDict(mutable=True)
        query.setlist("job_id", [i for i, _ in rows])
        query["verb"] = verb
        query["filters"] = urlencode({"backend": selected_backend(request)})
        return HttpResponseRedirect(url("bulk") + "?" + query.urlencode())

    @admin.action(description="Delete selected jobs…", permissions=["purge"])
    def delete_selected_jobs(self, request: HttpRequest, jobs: QuerySet[Job]) -> Any:
        return self._confirm_checked(request, jobs, "delete")

    @admin.action(description="Move selected jobs to another queue…", permissions=["move"])
    def move_selected(self, request: HttpRequest, jobs: QuerySet[Job]) -> Any:
        return self._confirm_checked(request, jobs, "move")

    @admin.action(description="Change the priority of selected jobs…", permissions=["reprioritize"])
    def reprioritize_selected(self, request: HttpRequest, jobs: QuerySet[Job]) -> Any:
        return self._confirm_checked(request, jobs, "priority")

    def bulk_view(self, request: HttpRequest) -> HttpResponse:
        return bulk.bulk(request, self)

    # -- the job page --------------------------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        console = Console(self)
        name = "django_blamequeue_job_"
        return [
            path("overview/", wrap(console.overview), name=name + "overview"),
            path("dlq/", wrap(console.dlq), name=name + "dlq"),
            path("dlq/retry/", wrap(console.dlq_retry), name=name + "dlq_retry"),
            path("dlq/retry-all/", wrap(console.dlq_retry_all), name=name + "dlq_retry_all"),
            path("purge/", wrap(console.purge), name=name + "purge"),
            path("queues/pause/", wrap(console.pause), name=name + "pause"),
            path("queues/resume/", wrap(console.resume), name=name + "resume"),
            path("queues/limits/", wrap(console.limits), name=name + "limits"),
            path("workers/", wrap(console.workers), name=name + "workers"),
            path("charts/", wrap(console.charts), name=name + "charts"),
            path("bulk/", wrap(self.bulk_view), name=name + "bulk"),
            path("flow/<str:flow_id>/", wrap(console.flow), name=name + "flow"),
            path("<path:object_id>/cancel/", wrap(self.cancel_view), name=name + "cancel"),
            path(
                "<path:object_id>/workflow/rerun/",
                wrap(workflows.rerun),
                name=name + "workflow_rerun",
            ),
            path(
                "<path:object_id>/workflow/send-event/",
                wrap(workflows.send_event),
                name=name + "workflow_send_event",
            ),
            *super().get_urls(),
        ]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        require(request, VIEW)
        stored = job_or_404(object_id, request.GET.get("backend"))
        if stored.encrypted and sealed.may_open(request, stored):
            operations.decrypted(
                request, backend_or_404(stored.backend), stored.job_id, stored.queue
            )
        info = sealed.shown(request, stored)
        rounds, history_error = attempts.history(
            stored, lambda found: sealed.shown_attempts(request, stored, found)
        )
        trail = list(
            AuditEvent.objects.using(listing_database(info.backend, AuditEvent))
            .filter(job_id=info.job_id)
            .order_by("id")[:AUDIT_TRAIL_ROWS]
        )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Job {info.job_id}",
            "subtitle": f"{info.name} on {info.queue}",
            "tabs": Console.tabs(request, "jobs"),
            "job": info,
            "state": display.state_badge(info.state),
            "reason": reason_note(info.state, info.reason),
            "progress": display.progress_bar(info.progress),
            "times": [
                (label, display.relative(getattr(info, field)))
                for label, field in (
                    ("created", "created_at"),
                    ("available", "available_at"),
                    ("started", "started_at"),
                    ("finished", "finished_at"),
                    ("lease expires", "lease_expires_at"),
                )
            ],
            "sealed": not sealed.may_open(request, stored),
            "payload_json": display.pretty_json(info.payload),
            "result_json": display.pretty_json(info.result) if info.result is not None else None,
            "checkpoint_json": display.pretty_json(info.checkpoint)
            if info.checkpoint is not None
            else None,
            "trail": [
                (e, display.relative(e.created_at), display.pretty_json(e.data)) for e in trail
            ],
            "trail_truncated": len(trail) >= AUDIT_TRAIL_ROWS,
            "rounds": rounds,
            "history_error": history_error,
            "unique_outcomes": _outcomes(trail),
            "audit_url": reverse("admin:django_blamequeue_auditevent_changelist")
            + "?"
            + urlencode({"job_id": info.job_id, "backend": info.backend}),
            "flow_url": url("flow", info.flow_id, backend=info.backend) if info.flow_id else None,
            "parent_url": url("change", info.parent_id, backend=info.backend)
            if info.parent_id
            else None,
            "depends": [(d, url("change", d, backend=info.backend)) for d in info.depends_on],
            "about_url": provenance.object_url(info.about),
            "chain": provenance.chain(info),
            "can_cancel": info.state not in TERMINAL and allowed(request, CANCEL),
            "can_retry": info.state == "failed" and allowed(request, RETRY),
            "cancel_url": url("cancel", info.job_id),
            "retry_url": url("dlq_retry"),
            "workflow": workflows.context(request, info),
        }
        return TemplateResponse(request, "admin/django_blamequeue/job_detail.html", context)

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return _cancel(request, object_id)


@require_POST
def _cancel(request: HttpRequest, object_id: str) -> HttpResponse:
    require(request, CANCEL)
    info = job_or_404(object_id, request.POST.get("backend"))
    backend = backend_or_404(info.backend)
    if operations.cancel(request, backend, [(info.job_id, info.queue)]):
        messages.success(request, f"Job {info.job_id} cancelled (or told to stop if running).")
    else:
        messages.warning(request, f"Job {info.job_id} is {info.state}: nothing to cancel.")
    return HttpResponseRedirect(url("change", info.job_id, backend=info.backend))


def _outcomes(trail: list[AuditEvent]) -> str:
    """What the calls a unique job absorbed did, from its audit rows (``AUDIT = "all"``):
    ``2 skip, 5 debounce``."""
    counts: dict[str, int] = {}
    for e in trail:
        if e.action == audit.UNIQUE:
            outcome = str(e.data.get("outcome") or "skip")
            counts[outcome] = counts.get(outcome, 0) + 1
    return ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))


def job_or_404(object_id: str, wanted: str | None) -> JobInfo:
    """The job a URL names, on the backend a query names (any backend when None); 404 for
    an id that is no job, including one that cannot be an id at all (NUL, too long)."""
    alias = backend_or_404(wanted).alias if wanted else None
    try:
        info = queue.get_job(object_id, backend=alias)
    except QueueError as exc:
        if exc.code != ErrorCode.BAD_ARGUMENT:
            raise
        info = None
    if info is None:
        raise Http404("no such job")
    return info


def selected_backend_of(job: Job) -> str | None:
    """The backend alias a listed row came from (the database it was read from)."""

    db = job._state.db
    for b in local_backends():
        if db in (b.database, listing_database(b.alias, Job)):
            return b.alias
    return None
