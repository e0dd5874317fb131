"""The console's POST actions — DLQ retries and purges, each behind its own permission,
CSRF-checked, audited with the acting user — and the request and URL helpers its views share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.urls import reverse
from django.utils.dateparse import parse_datetime
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods, require_POST

from django_blamequeue.admin import operations
from django_blamequeue.admin.base import PURGE, RETRY, backend_or_404, require
from django_blamequeue.api import queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.core.records import QueueStats
from django_blamequeue.core.validation import identifier, queue_name
from django_blamequeue.exceptions import QueueError

if TYPE_CHECKING:
    from django_blamequeue.admin.overview import Console

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


def _waiting(backend: Backend, q: str) -> int:
    counts = next((st.counts for st in stats_of(backend) if st.queue == q), {})
    return counts.get("pending", 0) + counts.get("blocked", 0)


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


def _back_to_dlq(backend: str, q: str) -> HttpResponse:
    return HttpResponseRedirect(_url("dlq", backend=backend, queue=q))


def _from_request(request: HttpRequest) -> tuple[Backend, str] | None:
    data = request.POST if request.method == "POST" else request.GET
    backend = backend_or_404(data.get("backend"))
    q = _queue_name(data.get("queue"))
    return None if q is None else (backend, q)


@require_POST
def dlq_retry(request: HttpRequest) -> HttpResponse:
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
        return _back_to_dlq(backend.alias, q)
    n = operations.retry(request, backend, rows)
    messages.success(request, f"{n} job(s) back to pending.")
    if request.POST.get("next") == "job" and len(rows) == 1:
        return HttpResponseRedirect(
            reverse("admin:django_blamequeue_job_change", args=[rows[0][0]])
            + "?"
            + urlencode({"backend": backend.alias})
        )
    return _back_to_dlq(backend.alias, q)


@require_http_methods(["GET", "POST"])
def dlq_retry_all(request: HttpRequest, console: Console) -> HttpResponse:
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
        return _back_to_dlq(backend.alias, q)
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
def purge(request: HttpRequest, console: Console) -> HttpResponse:
    require(request, PURGE)
    target = _from_request(request)
    if target is None:
        return HttpResponseBadRequest("not a queue name")
    backend, q = target
    if request.method == "POST":
        confirmed = _int(request.POST.get("count"))
        before = parse_datetime(request.POST.get("before") or "")
        if before is None or before.tzinfo is None:
            return HttpResponseBadRequest("no time bound: open the purge page again")
        n = operations.purge(request, backend, q, confirmed, before)
        left = _waiting(backend, q)
        newer = (
            f"; {left} newer job(s) arrived after the confirmation and were kept" if left else ""
        )
        messages.success(request, f"Purged {n} waiting job(s) from {q}{newer}.")
        return HttpResponseRedirect(_url("overview"))
    before = backend.now()  # read first: every job counted below was created by then
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
        before=before.isoformat(),
        question=f"Delete all {count:,} waiting job(s) of queue “{q}” on backend "
        f"“{backend.alias}” ({pending:,} pending, {blocked:,} blocked)? Running and finished "
        "jobs are kept, and so are jobs enqueued after this page was shown. This cannot be "
        "undone.",
        action_url=_url("purge"),
        button=f"Yes, delete {count:,} job(s)",
        cancel_url=_url("overview"),
        danger=True,
    )
