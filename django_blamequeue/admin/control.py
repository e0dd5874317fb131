"""The control plane in the console: pause and resume a queue, edit its limits, the Workers
page (docs/control.md).

Pause and resume are POST-only with CSRF, behind ``pause_queue``; editing limits needs
``change_queue_limits`` (reading them, the view permission). Each change is audited by the
backend with the acting user (and the reason of a pause); on a local backend the audit row is
written in the same transaction as the change (``operations._atomic``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods, require_POST

from django_blamequeue.admin import display, operations
from django_blamequeue.admin.base import VIEW, allowed, backend_or_404, require
from django_blamequeue.api import queue
from django_blamequeue.backends import all_backends
from django_blamequeue.core.controls import QueueControl, QueueLimits, WorkerInfo, weights_text
from django_blamequeue.core.validation import MAX_INT, limits, parse_key_weight, queue_name
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.worker import fleet

if TYPE_CHECKING:
    from django_blamequeue.admin.overview import Console

PAUSE = "django_blamequeue.pause_queue"
LIMITS = "django_blamequeue.change_queue_limits"
LIMIT_FIELDS = (
    "concurrency",
    "key_concurrency",
    "rate_max",
    "rate_per",
    "key_rate_max",
    "key_rate_per",
)
#: The form's text field of key weights: ``enterprise:*=5, trial:*=1`` (comma-separated).
WEIGHTS_FIELD = "key_weights"


def url(name: str, **query: Any) -> str:
    target = reverse(f"admin:django_blamequeue_job_{name}")
    query = {k: v for k, v in query.items() if v is not None}
    return f"{target}?{urlencode(query)}" if query else target


def _target(request: HttpRequest) -> tuple[Any, str] | None:
    data = request.POST if request.method == "POST" else request.GET
    backend = backend_or_404(data.get("backend"))
    try:
        return backend, queue_name(data.get("queue"))
    except QueueError:
        return None


def _back(request: HttpRequest) -> HttpResponse:
    return HttpResponseRedirect(url("overview"))


@require_POST
def pause(request: HttpRequest) -> HttpResponse:
    require(request, PAUSE)
    target = _target(request)
    if target is None:
        return HttpResponseBadRequest("not a queue name")
    backend, q = target
    reason = (request.POST.get("reason") or "").strip()[:1000]
    try:
        with operations._atomic(backend):
            queue.pause(q, backend=backend.alias, reason=reason, user=request.user.get_username())
    except QueueError as exc:
        messages.error(request, f"Not paused: {exc.message}")
        return _back(request)
    messages.success(request, f"Paused {q}: no worker claims from it; jobs in flight finish.")
    return _back(request)


@require_POST
def resume(request: HttpRequest) -> HttpResponse:
    require(request, PAUSE)
    target = _target(request)
    if target is None:
        return HttpResponseBadRequest("not a queue name")
    backend, q = target
    with operations._atomic(backend):
        queue.resume(q, backend=backend.alias, user=request.user.get_username())
    messages.success(request, f"Resumed {q}.")
    return _back(request)


def _number(text: str, what: str, *, integer: bool) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise QueueError(
            ErrorCode.BAD_LIMIT,
            f"{what} must be {'an integer' if integer else 'a number'}, not {text!r}",
        ) from None
    if integer and not 1 <= value <= MAX_INT:
        raise QueueError(ErrorCode.BAD_LIMIT, f"{what} must be an integer from 1 to {MAX_INT:,}")
    return value


def limits_from(post: Any) -> QueueLimits:
    """The form's limits (empty fields: no limit); ``BAD_LIMIT`` for anything else."""
    v = {
        f: _number(post.get(f, ""), f.replace("_", " "), integer=not f.endswith("per"))
        for f in LIMIT_FIELDS
    }
    weights = [w.strip() for w in post.get(WEIGHTS_FIELD, "").split(",") if w.strip()]

    def rate(most: str, per: str) -> tuple[Any, Any] | None:
        if v[most] is None and v[per] is None:
            return None
        if v[most] is None or v[per] is None:
            raise QueueError(
                ErrorCode.BAD_LIMIT,
                f"a rate limit needs both {most.replace('_', ' ')} and {per.replace('_', ' ')}",
            )
        return (int(v[most]), v[per])  # type: ignore[arg-type]

    return limits(
        concurrency=None if v["concurrency"] is None else int(v["concurrency"]),
        key_concurrency=None if v["key_concurrency"] is None else int(v["key_concurrency"]),
        rate_limit=rate("rate_max", "rate_per"),
        key_rate_limit=rate("key_rate_max", "key_rate_per"),
        key_weights=[parse_key_weight(w) for w in weights] or None,
    )


def _form(c: QueueControl) -> dict[str, str]:
    lim = c.limits

    def text(value: Any) -> str:
        return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)

    return {
        "concurrency": text(lim.concurrency),
        "key_concurrency": text(lim.key_concurrency),
        "rate_max": text(lim.rate_limit[0] if lim.rate_limit else None),
        "rate_per": text(lim.rate_limit[1] if lim.rate_limit else None),
        "key_rate_max": text(lim.key_rate_limit[0] if lim.key_rate_limit else None),
        "key_rate_per": text(lim.key_rate_limit[1] if lim.key_rate_limit else None),
        WEIGHTS_FIELD: weights_text(lim.key_weights),
    }


@require_http_methods(["GET", "POST"])
def limits_page(request: HttpRequest, console: Console) -> HttpResponse:
    require(request, VIEW)
    target = _target(request)
    if target is None:
        return HttpResponseBadRequest("not a queue name")
    backend, q = target
    error = None
    form: dict[str, str] | None = None
    if request.method == "POST":
        require(request, LIMITS)
        user = request.user.get_username()
        try:
            with operations._atomic(backend):
                if request.POST.get("clear"):
                    queue.clear_limits(q, backend=backend.alias, user=user)
                    done = f"Live limits of {q} cleared: its settings defaults apply."
                else:
                    new = queue.set_limits(
                        q, backend=backend.alias, user=user, **_fields(limits_from(request.POST))
                    )
                    done = f"Limits of {q} saved: {new.describe()}."
            messages.success(request, done)
            return HttpResponseRedirect(url("limits", backend=backend.alias, queue=q))
        except QueueError as exc:
            error = exc.message
            form = {f: request.POST.get(f, "") for f in (*LIMIT_FIELDS, WEIGHTS_FIELD)}
    c = queue.control(q, backend=backend.alias)
    return console.render(
        request,
        "limits.html",
        "overview",
        f"Limits of {q}",
        backend=backend.alias,
        queue=q,
        control=c,
        form=form or _form(c),
        error=error,
        can_change=allowed(request, LIMITS),
        can_pause=allowed(request, PAUSE),
        action_url=url("limits"),
        pause_url=url("pause"),
        resume_url=url("resume"),
        overview_url=url("overview"),
    )


def _fields(lim: QueueLimits) -> dict[str, Any]:
    return {
        "concurrency": lim.concurrency,
        "key_concurrency": lim.key_concurrency,
        "rate_limit": lim.rate_limit,
        "key_rate_limit": lim.key_rate_limit,
        "key_weights": dict(lim.key_weights) or None,
    }


def workers_page(request: HttpRequest, console: Console) -> HttpResponse:
    require(request, VIEW)
    rows: list[tuple[WorkerInfo, Any, Any, list[tuple[str, str]]]] = []
    for b in all_backends():
        try:
            found = fleet.workers(b)
        except Exception as exc:  # the registry's database is unreachable: say so
            messages.warning(request, f"backend {b.alias}: {exc}")
            continue
        for w in found:
            jobs = [
                (
                    job_id,
                    reverse("admin:django_blamequeue_job_change", args=[job_id])
                    + "?"
                    + urlencode({"backend": b.alias}),
                )
                for job_id in w.running
            ]
            rows.append((w, display.relative(w.started_at), display.relative(w.last_seen), jobs))
    live = sum(1 for w, *_ in rows if w.live)
    return console.render(request, "workers.html", "workers", "Workers", rows=rows, live=live)
