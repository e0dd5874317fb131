"""Bulk actions on the job list (docs/admin.md#bulk-actions): retry, cancel, delete, move to
another queue or change the priority of the checked jobs or of every job the list's filters
match.

Three steps. The list's "all matching" form (or a checked-rows action) opens a confirmation
page that states N, the jobs the action applies to, and fixes a bound: the moment it was
made, so jobs created after the confirmation are never touched. The POST then
works newest to oldest in batches of ``BATCH`` through the backend's bulk verbs; when a
request has used ``BUDGET`` seconds it answers a progress page that posts the next step by
itself (a few lines of JS; a button without it), so no request runs long enough to time
out. The last step writes one audit row: the action, the filter, the bound, N, the count
done and the user. Only the parameters of ``search.ALLOWED_PARAMS`` are accepted.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from typing import TYPE_CHECKING

from django.contrib import messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseRedirect,
    QueryDict,
)
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_http_methods

from django_blamequeue import audit
from django_blamequeue.admin import operations, search
from django_blamequeue.admin.actions import _int, _job_ids, _queue_name
from django_blamequeue.admin.base import (
    APP,
    CANCEL,
    PURGE,
    RETRY,
    allowed,
    backend_database,
    backend_or_404,
    local_backends,
    require,
)
from django_blamequeue.admin.overview import Console
from django_blamequeue.api import queue
from django_blamequeue.conf import get_settings
from django_blamequeue.core.states import TERMINAL
from django_blamequeue.core.validation import priority as valid_priority
from django_blamequeue.exceptions import QueueError
from django_blamequeue.models import Job

if TYPE_CHECKING:
    from django_blamequeue.admin.jobs import JobAdmin

MOVE = f"{APP}.move_job"
REPRIORITIZE = f"{APP}.reprioritize_job"
ADMIN_BULK = audit.ADMIN_PREFIX + "bulk"
#: Jobs per backend call, and seconds of work per request before it hands over to the next.
BATCH = 500
BUDGET = 5.0
RUNNING = ("inflight", "waiting_children")
EDITABLE = ("pending", "blocked", "failed")


@dataclass(frozen=True)
class Verb:
    label: str  # "Retry", shown on buttons and titles
    did: str  # "retried", for the message once done
    permission: str
    states: Callable[[QuerySet[Job]], QuerySet[Job]]  # the jobs the verb applies to
    explains: str


VERBS: dict[str, Verb] = {
    "retry": Verb(
        "Retry",
        "retried",
        RETRY,
        lambda qs: qs.filter(state="failed"),
        "failed jobs back to pending",
    ),
    "cancel": Verb(
        "Cancel",
        "cancelled or told to stop",
        CANCEL,
        lambda qs: qs.exclude(state__in=TERMINAL),
        "waiting jobs cancelled, running ones told to stop",
    ),
    "delete": Verb(
        "Delete",
        "deleted",
        PURGE,
        lambda qs: qs.exclude(state__in=RUNNING),
        "deleted with their history (running jobs are kept); this cannot be undone",
    ),
    "move": Verb(
        "Move",
        "moved",
        MOVE,
        lambda qs: qs.filter(state__in=EDITABLE),
        "pending, blocked and failed jobs moved to another queue",
    ),
    "priority": Verb(
        "Change the priority of",
        "given the new priority",
        REPRIORITIZE,
        lambda qs: qs.filter(state__in=EDITABLE),
        "pending, blocked and failed jobs given a new priority",
    ),
}


def permitted(request: HttpRequest) -> list[tuple[str, str]]:
    """The verbs this user may use, as (key, label) for the list's form."""
    return [(k, v.label) for k, v in VERBS.items() if allowed(request, v.permission)]


@dataclass(frozen=True)
class Target:
    """What the action needs besides the jobs: the queue to move to, the new priority."""

    queue: str | None = None
    priority: int | None = None

    @classmethod
    def of(cls, verb: str, data: QueryDict, *, required: bool) -> Target:
        """From the form; the confirmation page (not ``required``) asks for a missing one."""
        if not required and not (data.get("to_queue") or data.get("to_priority")):
            return cls()
        if verb == "move":
            q = _queue_name(data.get("to_queue"))
            if q is None:
                raise IncorrectLookupParameters("moving needs the name of the queue to move to")
            return cls(queue=q)
        if verb == "priority":
            try:
                return cls(priority=valid_priority(int(data.get("to_priority") or "")))
            except (ValueError, QueueError) as exc:
                raise IncorrectLookupParameters(f"not a priority: {exc}") from None
        return cls()


def filter_params(data: QueryDict) -> QueryDict:
    """The list's filter parameters, refused unless every one is documented (never an
    arbitrary field lookup: a URL must not filter on ``lease_token``)."""
    params = QueryDict(data.get("filters") or "", mutable=True)
    params.pop("p", None)
    unknown = sorted(set(params) - search.ALLOWED_PARAMS)
    if unknown:
        raise IncorrectLookupParameters(f"not a job list filter: {', '.join(unknown)}")
    return params


def matching(model_admin: JobAdmin, request: HttpRequest, params: QueryDict) -> QuerySet[Job]:
    """The jobs the list shows for ``params``, through the list's own filters and search."""
    listing = copy.copy(request)
    listing.method = "GET"
    listing.GET = params  # type: ignore[assignment]  # read only, like a request's
    changelist = model_admin.get_changelist_instance(listing)
    found: QuerySet[Job] = changelist.get_queryset(listing)
    return found.order_by()


def local_alias(params: QueryDict) -> str:
    """The local backend whose job list the filter reads (the list's own default when it
    names none); a remote backend has no job list to act on."""
    wanted = params.get("backend")
    aliases = [b.alias for b in local_backends()]
    if wanted and wanted not in aliases:
        raise IncorrectLookupParameters(f"backend {wanted!r} has no job list to act on")
    if wanted:
        return wanted
    default = get_settings().default_backend
    if default in aliases or not aliases:
        return default
    return aliases[0]


def selection(
    model_admin: JobAdmin, request: HttpRequest, verb: Verb, data: QueryDict
) -> tuple[QuerySet[Job], QueryDict, list[str], str]:
    """The jobs an action applies to — the checked ids or the filter's matches, narrowed to
    the states the verb acts on — and the backend they are on."""
    checked = _job_ids(data.getlist("job_id")[: operations.MAX_SELECTED])
    params = filter_params(data)
    alias = local_alias(params)
    if checked:
        qs = model_admin.get_queryset_for(alias).filter(id__in=checked)
    else:
        qs = matching(model_admin, request, params)
    # what an action applies to is read from the primary, never a replica that lags it
    return verb.states(qs.using(backend_database(alias))), params, checked, alias


def apply(verb: str, backend: str, ids: list[str], target: Target) -> int:
    if verb == "retry":
        return queue.dlq_retry_many(ids, backend=backend)
    if verb == "cancel":
        return sum(1 for i in ids if queue.cancel(i, backend=backend))
    if verb == "delete":
        return queue.delete_jobs(ids, backend=backend)
    if verb == "move":
        assert target.queue is not None
        return queue.move_jobs(ids, target.queue, backend=backend)
    assert target.priority is not None
    return queue.set_priority(ids, target.priority, backend=backend)


@require_http_methods(["GET", "POST"])
def bulk(request: HttpRequest, model_admin: JobAdmin) -> HttpResponse:
    data = request.POST if request.method == "POST" else request.GET
    verb_key = data.get("verb") or ""
    verb = VERBS.get(verb_key)
    if verb is None:
        return HttpResponseBadRequest("not a bulk action")
    require(request, verb.permission)
    try:
        target = Target.of(verb_key, data, required=request.method == "POST")
        jobs, params, checked, alias = selection(model_admin, request, verb, data)
    except IncorrectLookupParameters as exc:
        return HttpResponseBadRequest(str(exc))
    if request.method == "GET":
        return confirm(request, model_admin, verb_key, jobs, params, checked, target, alias)
    return run(request, model_admin, verb_key, jobs, params, checked, target, alias)


def confirm(
    request: HttpRequest,
    model_admin: JobAdmin,
    verb_key: str,
    jobs: QuerySet[Job],
    params: QueryDict,
    checked: list[str],
    target: Target,
    backend: str,
) -> HttpResponse:
    """States N, then fixes the bound: now. (N is counted without the bound, which nothing
    can be created after yet: a plain count can use the state indexes; a job created between
    the two is acted on, and the final message says the count differed.)"""
    verb = VERBS[verb_key]
    count = jobs.count()
    bound = timezone.now()
    what = f"the {len(checked):,} checked job(s)" if checked else "all jobs matching the filter"
    object_ = (
        f" to queue “{target.queue}”"
        if target.queue
        else (f" to priority {target.priority}" if target.priority is not None else "")
    )
    return Console(model_admin).render(
        request,
        "bulk.html",
        "jobs",
        f"{verb.label} {count:,} job(s)?",
        verb=verb_key,
        label=verb.label,
        explains=verb.explains,
        count=count,
        bound=bound.isoformat(),
        bound_time=bound.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        what=what,
        object=object_,
        backend=backend,
        filters=params.urlencode(),
        described=_describe(params, checked),
        checked=checked,
        target=target,
        danger=verb_key in ("delete", "cancel"),
        action_url=reverse("admin:django_blamequeue_job_bulk"),
        cancel_url=reverse("admin:django_blamequeue_job_changelist") + "?" + params.urlencode(),
    )


def run(
    request: HttpRequest,
    model_admin: JobAdmin,
    verb_key: str,
    jobs: QuerySet[Job],
    params: QueryDict,
    checked: list[str],
    target: Target,
    backend: str,
) -> HttpResponse:
    """Batches, newest first, below the cursor and at most the bound, for ``BUDGET`` s."""
    bound = parse_datetime(request.POST.get("bound") or "")
    if bound is None or bound.tzinfo is None:
        return HttpResponseBadRequest("the confirmation's bound is missing")
    cursor = data_id(request.POST.get("cursor"))
    confirmed = _int(request.POST.get("count"))
    done = _int(request.POST.get("done"))
    seen = _int(request.POST.get("seen"))
    todo = jobs.filter(created_at__lte=bound).order_by("-id")
    started = time.monotonic()
    finished = False
    while True:  # at least one batch a request, then more while the budget lasts
        page = todo.filter(id__lt=cursor) if cursor else todo
        ids = list(page.values_list("id", flat=True)[:BATCH])
        if ids:
            done += apply(verb_key, backend, ids, target)
            seen += len(ids)
            cursor = ids[-1]
        if len(ids) < BATCH:
            finished = True
            break
        if time.monotonic() - started >= BUDGET:
            break
    verb = VERBS[verb_key]
    if not finished:
        return Console(model_admin).render(
            request,
            "bulk_progress.html",
            "jobs",
            f"{verb.label} {confirmed:,} job(s): {seen:,} done so far",
            verb=verb_key,
            backend=backend,
            filters=params.urlencode(),
            checked=checked,
            target=target,
            bound=bound.isoformat(),
            cursor=cursor,
            count=confirmed,
            done=done,
            seen=seen,
            percent=min(100, seen * 100 // max(1, confirmed)),
            action_url=reverse("admin:django_blamequeue_job_bulk"),
        )
    audit.record(
        [
            audit.Event(
                action=ADMIN_BULK,
                backend=backend,
                queue=params.get("queue"),
                user=request.user.get_username(),
                data={
                    "verb": verb_key,
                    "filter": _describe(params, checked),
                    "job_ids": checked[:50],
                    "created_before": bound.isoformat(),
                    "confirmed_count": confirmed,
                    "count": done,
                    "to_queue": target.queue,
                    "to_priority": target.priority,
                },
            )
        ],
        using=backend_or_404(backend).database,
    )
    note = "" if done == confirmed else f" (the confirmation said {confirmed:,})"
    messages.success(request, f"{done:,} job(s) {verb.did}{note}.")
    return HttpResponseRedirect(
        reverse("admin:django_blamequeue_job_changelist") + "?" + params.urlencode()
    )


def data_id(value: str | None) -> str | None:
    found = _job_ids([value]) if value else []
    return found[0] if found else None


def _describe(params: QueryDict, checked: list[str]) -> dict[str, str]:
    """The filter as the audit row and the confirmation page show it."""
    described = {k: params.get(k) or "" for k in sorted(params) if k not in ("o", "p")}
    if checked:
        described["checked"] = f"{len(checked)} job(s)"
    return described
