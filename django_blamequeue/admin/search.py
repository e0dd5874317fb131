"""Searching the job list (docs/admin.md#searching-jobs): by a payload value at a JSON path,
by error class and text, by who enqueued it (user, request path), by creation time.

Each search is a list filter with its own URL parameter, so a search is a shareable URL and
they combine. ``ALLOWED_PARAMS`` is the whole list of parameters the job list's URL may
carry: the bulk actions refuse any other (never an arbitrary field lookup such as
``lease_token__startswith``), and the job list itself can enforce the same list.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, time
from typing import Any

from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import F, Func, QuerySet, TextField
from django.http import HttpRequest
from django.utils.dateparse import parse_date, parse_datetime

from django_blamequeue import encryption
from django_blamequeue.admin.base import matching
from django_blamequeue.admin.filters import SAMPLE_ROWS, ValueFilter, database_of

#: One key or list index per step: ``customer.id``, ``items.0.sku``.
PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,62}(\.([A-Za-z_][A-Za-z0-9_-]{0,62}|\d{1,6})){0,7}$")
#: How many of the newest JSON payloads the argument filter reads for its suggestions.
SUGGESTION_ROWS = 200
MAX_SUGGESTIONS = 30


def parse_argument(text: str) -> tuple[tuple[str, ...], str]:
    """``customer_id=1234`` as (("customer_id",), "1234"); a bad path is a 400 for the list."""
    path, sep, value = text.partition("=")
    path = path.strip()
    if not sep or not PATH.match(path):
        raise IncorrectLookupParameters(
            f"argument search needs path=value, the path keys and list indexes joined by dots "
            f"(customer_id=1234, order.lines.0.sku=X), not {text!r}"
        )
    return tuple(path.split(".")), value.strip()


class PayloadAt(Func):
    """The payload's value at ``path`` as text (NULL for a payload that is not JSON):
    PostgreSQL ``blamequeue_payload_json(payload, content_type) #>> '{a,b}'`` (index it as
    docs/indexes.md#searching-by-argument says); SQLite ``json_extract``."""

    output_field = TextField()

    def __init__(self, path: tuple[str, ...]) -> None:
        super().__init__(F("payload"), F("content_type"))
        self.path = path

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        sql, params = super().as_sql(
            compiler, connection, function="blamequeue_payload_json", **extra
        )
        return f"({sql} #>> %s)", [*params, "{" + ",".join(self.path) + "}"]

    def as_sqlite(  # type: ignore[override]
        self, compiler: Any, connection: Any, **extra: Any
    ) -> tuple[str, list[Any]]:
        payload, p1 = compiler.compile(self.source_expressions[0])
        content_type, p2 = compiler.compile(self.source_expressions[1])
        where = "$" + "".join(f"[{s}]" if s.isdigit() else f'."{s}"' for s in self.path)
        text = f"CAST({payload} AS TEXT)"
        # JSON true/false read as 'true'/'false', as PostgreSQL's #>> reads them (not 1/0).
        sql = (
            f"(CASE WHEN {content_type} = 'application/json' AND json_valid({text}) "
            f"THEN CASE json_type({text}, %s) WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' "
            f"ELSE CAST(json_extract({text}, %s) AS TEXT) END END)"
        )
        return sql, [*p2, *p1, *p1, where, *p1, where]

    def as_sql(  # type: ignore[override]
        self, compiler: Any, connection: Any, **extra: Any
    ) -> tuple[str, list[Any]]:
        raise IncorrectLookupParameters(
            f"argument search works on PostgreSQL and SQLite, not {connection.vendor}"
        )


def _scalar(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) or value is None else str(value)


def argument_suggestions(payloads: list[Any]) -> list[str]:
    """``key=value`` of the top-level scalars of recent payloads, most frequent first."""
    seen: dict[str, int] = {}
    for payload in payloads:
        if not isinstance(payload, dict):
            continue
        for key, value in payload.items():
            if isinstance(value, str | int | float | bool) and PATH.match(str(key)):
                pair = f"{key}={_scalar(value)}"
                if len(pair) <= 100:
                    seen[pair] = seen.get(pair, 0) + 1
    return sorted(seen, key=lambda p: (-seen[p], p))[:MAX_SUGGESTIONS]


class SearchFilter(ValueFilter):
    """A typed value, with suggestions from recent jobs offered as the input's completions
    (not as links: a link list of payload values would be long)."""

    placeholder = ""
    suggestions: list[str]
    #: A filter that is one field lookup names it here; ``lookup_value`` shapes the typed
    #: text, ``empty_matches`` says whether an empty value still filters.
    lookup = ""
    empty_matches = False

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        self.suggestions = self.choices_for(request, model_admin)
        current = self.value()
        return [(current, current)] if current else []

    def lookup_value(self, value: str) -> str:
        return value

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None or not (value or self.empty_matches):
            return queryset
        found: QuerySet[Any] = matching(queryset, **{self.lookup: self.lookup_value(value)})
        return found


class ArgumentFilter(SearchFilter):
    """``arg=customer_id=1234``: jobs whose JSON payload holds that value at that path."""

    title = "argument"
    parameter_name = "arg"
    placeholder = "customer_id=1234"

    def choices_for(self, request: HttpRequest, model_admin: Any) -> list[str]:
        rows = (
            model_admin.model.objects.using(database_of(request, model_admin))
            .filter(content_type="application/json")
            .order_by("-pk")
            .values_list("payload", flat=True)[:SUGGESTION_ROWS]
        )
        payloads = []
        for raw in rows:
            try:
                payloads.append(json.loads(bytes(raw)))
            except ValueError:
                continue
        return argument_suggestions(payloads)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        path, wanted = parse_argument(value)
        found: QuerySet[Any] = matching(queryset.alias(bq_arg=PayloadAt(path)), bq_arg=wanted)
        return found


class ErrorClassFilter(SearchFilter):
    """``error_class=TimeoutError``: jobs whose last error was raised as that class."""

    title = "error class"
    parameter_name = "error_class"
    placeholder = "TimeoutError"
    lookup = "error__startswith"
    empty_matches = True

    def choices_for(self, request: HttpRequest, model_admin: Any) -> list[str]:
        rows = (
            model_admin.model.objects.using(database_of(request, model_admin))
            .order_by("-pk")
            .values_list("error", flat=True)[:SAMPLE_ROWS]
        )
        found = {
            e.partition(":")[0]
            for e in rows
            if e and ":" in e and not encryption.is_sealed_text(e)  # "fernet:" is no class
        }
        return sorted(c for c in found if c.isidentifier())[:MAX_SUGGESTIONS]

    def lookup_value(self, value: str) -> str:
        return f"{value.strip()}:"


class ErrorTextFilter(SearchFilter):
    """``error=connection refused``: jobs whose last error contains the text (any case)."""

    title = "error text"
    parameter_name = "error"
    placeholder = "text in the error"
    lookup = "error__icontains"


class OriginUserFilter(SearchFilter):
    """``user=alice``: jobs enqueued while serving a request of that user."""

    title = "user"
    parameter_name = "user"
    placeholder = "username"
    lookup = "origin__user"
    empty_matches = True

    def choices_for(self, request: HttpRequest, model_admin: Any) -> list[str]:
        rows = (
            model_admin.model.objects.using(database_of(request, model_admin))
            .order_by("-pk")
            .values_list("origin", flat=True)[:SAMPLE_ROWS]
        )
        users = {o.get("user") for o in rows if isinstance(o, dict)}
        return sorted(str(u) for u in users if u)[:MAX_SUGGESTIONS]


class RequestPathFilter(SearchFilter):
    """``path=/orders/``: jobs enqueued while serving a request whose line contains it."""

    title = "request path"
    parameter_name = "path"
    placeholder = "/orders/"
    lookup = "origin__request__icontains"


def parse_when(text: str, *, end: bool) -> datetime:
    """An ISO date or date-time (UTC unless it says); a date alone means its whole day."""
    text = text.strip()
    try:
        day = parse_date(text)
        when = None if day else parse_datetime(text)
    except ValueError:
        when = day = None
    if when is None and day is not None:
        when = datetime.combine(day, time.max if end else time.min)
    if when is None:
        raise IncorrectLookupParameters(
            f"not a date or date-time: {text!r} (use 2026-12-05 or 2026-12-05T03:00)"
        )
    return when if when.tzinfo else when.replace(tzinfo=UTC)


class CreatedAfterFilter(SearchFilter):
    """``created_after=2026-12-05T03:00``: jobs created at or after that time."""

    title = "created after"
    parameter_name = "created_after"
    placeholder = "2026-12-05T03:00"

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        found: QuerySet[Any] = matching(queryset, created_at__gte=parse_when(value, end=False))
        return found


class CreatedBeforeFilter(SearchFilter):
    """``created_before=2026-12-05``: jobs created before the end of that time (or day)."""

    title = "created before"
    parameter_name = "created_before"
    placeholder = "2026-12-05"

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        found: QuerySet[Any] = matching(queryset, created_at__lte=parse_when(value, end=True))
        return found


SEARCH_FILTERS = (
    ArgumentFilter,
    ErrorClassFilter,
    ErrorTextFilter,
    OriginUserFilter,
    RequestPathFilter,
    CreatedAfterFilter,
    CreatedBeforeFilter,
)

#: Every parameter the job list's URL may carry: its filters (``flow_id`` and ``trace_id``
#: are the links of the job and flow pages), its search box, the page and the ordering.
#: Anything else is refused by the bulk actions.
ALLOWED_PARAMS = frozenset(
    {
        "backend",
        "state",
        "state__exact",
        "queue",
        "name",
        "classification",
        "about",
        "origin",
        "flow_id",
        "trace_id",
        "q",
        "p",
        "o",
        *(str(f.parameter_name) for f in SEARCH_FILTERS),
    }
)
