"""List filters that stay cheap on millions of rows.

Django's field filters list their choices with ``SELECT DISTINCT`` over the whole table and
offer facet counts; these do neither. Queue names come from the newest rows and the chart
buckets; names, classifications and users from the newest rows; every
filter also takes a typed value, so an old or rare value is one search box away.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import PAGE_VAR, ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest

from django_blamequeue.admin.base import (
    listing_database,
    local_backends,
    matching,
    selected_backend,
)
from django_blamequeue.admin.operations import known_actions

#: How many of the newest rows a sampled filter reads to offer choices.
SAMPLE_ROWS = 5_000
MAX_CHOICES = 50


class ValueFilter(admin.SimpleListFilter):
    """Exact match on ``field``; choices from ``choices_for``, plus a typed value."""

    template = "admin/django_blamequeue/filter.html"
    field = ""
    accepts_input = True
    hidden_params: list[tuple[str, str]]

    def __init__(
        self, request: HttpRequest, params: dict[str, Any], model: Any, model_admin: Any
    ) -> None:
        self.parameter_name = self.parameter_name or self.field
        self.hidden_params = []
        super().__init__(request, params, model, model_admin)

    def choices_for(self, request: HttpRequest, model_admin: Any) -> list[str]:
        return []

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        values = self.choices_for(request, model_admin)
        current = self.value()
        if current is not None and current not in values:
            values = [current, *values]
        return [(v, v) for v in values[:MAX_CHOICES]]

    def has_output(self) -> bool:
        return True

    #: The column has no index of its own: match it in one scan (see ``base.matching``).
    unindexed = False

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        if self.unindexed:
            result: QuerySet[Any] = matching(queryset, **{self.field: value})
            return result
        return queryset.filter(**{self.field: value})

    def choices(self, changelist: ChangeList) -> Iterator[dict[str, Any]]:  # type: ignore[override]
        param = str(self.parameter_name)
        self.hidden_params = [
            (k, v) for k, v in changelist.params.items() if k not in (param, PAGE_VAR)
        ]
        yield {
            "selected": self.value() is None,
            "query_string": changelist.get_query_string(remove=[param]),
            "display": "All",
        }
        for lookup, title in self.lookup_choices:
            yield {
                "selected": self.value() == str(lookup),
                "query_string": changelist.get_query_string({param: lookup}),
                "display": title,
            }


def database_of(request: HttpRequest, model_admin: Any) -> str:

    return listing_database(selected_backend(request), model_admin.model)


def newest_values(request: HttpRequest, model_admin: Any, field: str) -> list[str]:
    """Distinct non-empty values of ``field`` among the newest ``SAMPLE_ROWS`` rows.

    Read as one indexed scan of the newest rows and deduplicated here: ``WHERE pk IN (newest)
    … DISTINCT`` lets PostgreSQL pick a semi-join over the whole table.
    """
    rows = (
        model_admin.model.objects.using(database_of(request, model_admin))
        .order_by("-pk")
        .values_list(field, flat=True)[:SAMPLE_ROWS]
    )
    return sorted({v for v in rows if v})[:MAX_CHOICES]


def recent_queues(request: HttpRequest, model_admin: Any) -> list[str]:
    """Queues of the newest rows and of the last week's chart buckets (a small table).

    Not a loose index scan over ``queue``: the indexes that lead with it are partial (live
    jobs only), so each ``queue > last`` step would scan the table.
    """
    from django_blamequeue.models import TimeBucket

    alias = selected_backend(request)
    charted = TimeBucket.objects.using(database_of(request, model_admin)).filter(
        backend=alias, step=3600
    )
    found = set(newest_values(request, model_admin, "queue"))
    found.update(charted.order_by().values_list("queue", flat=True).distinct())
    return sorted(found)[:MAX_CHOICES]


class QueueFilter(ValueFilter):
    title = "queue"
    field = "queue"

    def choices_for(self, request: HttpRequest, model_admin: Any) -> list[str]:
        return recent_queues(request, model_admin)


class NameFilter(ValueFilter):
    unindexed = True
    title = "name"
    field = "name"

    def choices_for(self, request: HttpRequest, model_admin: Any) -> list[str]:
        return newest_values(request, model_admin, "name")


class ClassificationFilter(ValueFilter):
    unindexed = True
    title = "classification"
    field = "classification"

    def choices_for(self, request: HttpRequest, model_admin: Any) -> list[str]:
        return newest_values(request, model_admin, "classification")


class UserFilter(ValueFilter):
    unindexed = True
    title = "user"
    field = "user"

    def choices_for(self, request: HttpRequest, model_admin: Any) -> list[str]:
        return newest_values(request, model_admin, "user")


class JobIdFilter(ValueFilter):
    title = "job id"
    field = "job_id"


class FlowFilter(ValueFilter):
    title = "flow id"
    field = "flow_id"


class ActionFilter(ValueFilter):
    """Audit actions: every name the package defines, no query."""

    title = "action"
    field = "action"

    def choices_for(self, request: HttpRequest, model_admin: Any) -> list[str]:

        return known_actions()

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        values = self.choices_for(request, model_admin)
        current = self.value()
        if current is not None and current not in values:
            values = [current, *values]
        return [(v, v.removeprefix("system.queue.")) for v in values]


class BackendFilter(admin.SimpleListFilter):
    """Which local backend's database to list; there is no "all" (they are separate tables)."""

    title = "backend"
    parameter_name = "backend"
    template = "admin/django_blamequeue/filter.html"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(b.alias, f"{b.alias} ({b.protocol})") for b in local_backends()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset  # the model admin picks the database in get_queryset

    def choices(self, changelist: ChangeList) -> Iterator[dict[str, Any]]:  # type: ignore[override]
        current = selected_backend(self.request)
        for alias, title in self.lookup_choices:
            yield {
                "selected": current == alias,
                "query_string": changelist.get_query_string({self.parameter_name: alias}),
                "display": title,
            }
