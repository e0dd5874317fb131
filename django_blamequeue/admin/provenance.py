"""The blame trail and jobs about objects, in the admin.

- ``JobTimelineMixin``: put it on your own ``ModelAdmin`` and an object's change page lists the
  jobs about it (``enqueue(about=obj)``), newest first, with their state, times and links.
- The job page: the object a job is about, linked to its admin page, and the chain of what
  enqueued it, up to the root ("enqueued by job X, enqueued by POST /orders/ by alice at
  orders/views.py:88 in create").
- The job list: ``AboutFilter`` (by model, or one object), ``OriginFilter`` (what enqueued the
  jobs) and the search of an ``about`` key or a call site.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse
from django.utils.http import urlencode

from django_blamequeue.admin import display
from django_blamequeue.admin.base import VIEW, allowed, matching
from django_blamequeue.admin.filters import ValueFilter, newest_values
from django_blamequeue.api import queue
from django_blamequeue.core.records import JobInfo
from django_blamequeue.exceptions import QueueError
from django_blamequeue.jobs.origin import about_key, describe, split_about

#: How far up the chain of parent jobs the job page follows.
CHAIN_DEPTH = 10
TIMELINE_ROWS = 50


def job_url(job_id: str, backend: str | None) -> str:
    target = reverse("admin:django_blamequeue_job_change", args=[job_id])
    return f"{target}?{urlencode({'backend': backend})}" if backend else target


def object_url(about: str | None) -> str | None:
    """The admin change page of the object an ``about`` key names, if the admin has one."""
    if not about:
        return None
    app_label, model_name, pk = split_about(about)
    try:
        apps.get_model(app_label, model_name)
        return reverse(f"admin:{app_label}_{model_name}_change", args=[pk])
    except (LookupError, NoReverseMatch, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Link:
    """One step of a job's chain: the job that enqueued the one below it, or the root."""

    text: str
    url: str | None = None
    job: JobInfo | None = None


def chain(info: JobInfo, depth: int = CHAIN_DEPTH) -> list[Link]:
    """What enqueued ``info``, step by step up to the root: parent jobs (looked up on every
    backend), then the root's own origin (request, user, schedule, site)."""
    steps: list[Link] = []
    current = info
    seen = {info.job_id}
    for _ in range(depth):
        origin = current.origin or {}
        parent_id = origin.get("parent_job") or None
        if parent_id is None or parent_id in seen:
            break
        seen.add(parent_id)
        try:
            parent = queue.get_job(parent_id)
        except QueueError:
            parent = None
        where = f" at {origin['site']}" if origin.get("site") else ""
        if parent is None:
            steps.append(Link(f"enqueued by job {parent_id} (pruned){where}"))
            return steps
        text = f"enqueued by job {parent.job_id} ({parent.name}){where}"
        steps.append(Link(text, job_url(parent.job_id, parent.backend), parent))
        current = parent
    steps.append(Link(enqueued(current.origin)))
    return steps


def enqueued(origin: Mapping[str, Any] | None) -> str:
    """The root's step: "enqueued by POST /orders/ by alice at …", or "enqueued at
    manage.py:18 in main" when only the call site is known (a command, a shell)."""
    text = describe(origin)
    if text == "unknown":
        return "enqueued from an unknown place (no origin recorded)"
    return f"enqueued {text}" if text.startswith("at ") else f"enqueued by {text}"


def about_search(queryset: QuerySet[Any], term: str) -> QuerySet[Any] | None:
    """Jobs about the object a search term names (``app.model:pk``, indexed), or whose call
    site contains it (``views.py:88``, one scan); None if the term is neither."""
    if ":" in term and "." in term.partition(":")[0] and " " not in term:
        found = queryset.filter(about=term)
        if found.exists():
            return found
    if ".py" in term:
        result: QuerySet[Any] = matching(queryset, origin__site__icontains=term)
        return result
    return None


class AboutFilter(ValueFilter):
    """By model (``app_label.model_name``) or one object (``app_label.model_name:pk``)."""

    title = "about"
    field = "about"

    def choices_for(self, request: HttpRequest, model_admin: Any) -> list[str]:
        return sorted({v.partition(":")[0] for v in newest_values(request, model_admin, "about")})

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        if ":" in value:
            return queryset.filter(about=value)
        # A range on the (about, id) index: every key that starts with "label:".
        return queryset.filter(about__gte=f"{value}:", about__lt=f"{value};")


class OriginFilter(admin.SimpleListFilter):
    """What enqueued the jobs: a request, a job, a schedule, a flow, or plain code."""

    title = "enqueued by"
    parameter_name = "origin"
    template = "admin/django_blamequeue/filter.html"
    KINDS = {
        "request": "a request",
        "parent_job": "a job",
        "schedule": "a schedule",
        "flow": "a flow",
    }

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [*self.KINDS.items(), ("code", "other code")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value in self.KINDS:
            result: QuerySet[Any] = matching(queryset, origin__has_key=value)
            return result
        if value == "code":
            plain = queryset.exclude(origin__isnull=True)
            for key in self.KINDS:
                plain = plain.exclude(origin__has_key=key)
            return plain
        return queryset

    def choices(self, changelist: ChangeList) -> Iterator[dict[str, Any]]:  # type: ignore[override]
        yield {
            "selected": self.value() is None,
            "query_string": changelist.get_query_string(remove=[self.parameter_name]),
            "display": "All",
        }
        for value, title in self.lookup_choices:
            yield {
                "selected": self.value() == value,
                "query_string": changelist.get_query_string({self.parameter_name: value}),
                "display": title,
            }


class JobTimelineMixin:
    """For your ``ModelAdmin``: the object's change page lists the jobs about it.

    ::

        @admin.register(Order)
        class OrderAdmin(JobTimelineMixin, admin.ModelAdmin):
            pass

    The list is ``queue.jobs_about(obj)`` (every backend, newest first, ``TIMELINE_ROWS``)
    and is shown to users who may view jobs.
    """

    change_form_template = "admin/django_blamequeue/about_change_form.html"
    blamequeue_timeline_rows = TIMELINE_ROWS

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = dict(extra_context or {})
        obj = self.get_object(request, object_id)  # type: ignore[attr-defined]
        if obj is not None and allowed(request, VIEW):
            context["blamequeue_timeline"] = timeline(obj, self.blamequeue_timeline_rows)
            context["blamequeue_about"] = about_key(obj)
        response: HttpResponse = super().change_view(  # type: ignore[misc]
            request, object_id, form_url, context
        )
        return response


def timeline(obj: Any, limit: int = TIMELINE_ROWS) -> list[dict[str, Any]]:
    """The rows of an object's job timeline."""
    rows = []
    for info in queue.jobs_about(obj, limit=limit):
        rows.append(
            {
                "job": info,
                "url": job_url(info.job_id, info.backend),
                "state": display.state_badge(info.state),
                "created": display.relative(info.created_at),
                "finished": display.relative(info.finished_at),
                "origin": describe(info.origin),
            }
        )
    return rows
