"""What every console screen shares: permissions, backend lookup, a paginator that never counts
a whole table, and read-only model admins.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Model
from django.http import Http404, HttpRequest
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_blamequeue.backends import all_backends, get_backend
from django_blamequeue.backends.base import Backend
from django_blamequeue.backends.replicas import read_database
from django_blamequeue.conf import get_settings

APP = "django_blamequeue"
VIEW = f"{APP}.view_job"
RETRY = f"{APP}.retry_job"
PURGE = f"{APP}.purge_queue"
CANCEL = f"{APP}.cancel_job"
VIEW_AUDIT = f"{APP}.view_auditevent"

#: A list never counts past this many rows: it shows "10,000+" and asks for a filter instead.
COUNT_CAP = 10_000


def allowed(request: HttpRequest, perm: str) -> bool:
    return bool(request.user.has_perm(perm))


def require(request: HttpRequest, perm: str) -> None:
    """403 unless the user holds ``perm`` (superusers hold every permission)."""
    if not allowed(request, perm):
        raise PermissionDenied(f"needs the {perm} permission")


def backend_or_404(alias: str | None) -> Backend:
    """The backend named in a query string or form (default: ``DEFAULT_BACKEND``)."""
    name = alias or get_settings().default_backend
    if name not in get_settings().backends:
        raise Http404(f"no backend {name!r}")
    return get_backend(name)


def local_backends() -> list[Backend]:
    """Backends whose jobs are rows of a Django database (the job list reads those)."""
    return [b for b in all_backends() if b.database is not None]


def backend_database(alias: str | None) -> str:
    """Where a backend's jobs (local) or audit rows (any backend) live: its primary, which
    every action writes to."""
    backend = backend_or_404(alias)
    return backend.database or "default"


def listing_database(alias: str | None, model: type[Model]) -> str:
    """Where a read-only listing of ``model`` for a backend reads: the replica the project's
    ``DATABASE_ROUTERS`` name for its database, else the database itself."""
    return read_database(model, backend_database(alias))


def selected_backend(request: HttpRequest) -> str:
    """The ``backend`` of the query string if it is a local backend, else the default one."""
    wanted = request.GET.get("backend")
    aliases = [b.alias for b in local_backends()]
    if wanted in aliases:
        return str(wanted)
    default = get_settings().default_backend
    return default if default in aliases else (aliases[0] if aliases else default)


def matching(queryset: Any, **lookup: Any) -> Any:
    """``queryset.filter(**lookup)`` for a column without an index, in one scan.

    The page and the capped count would each scan the table again; the matching ids, fetched
    once, turn both into primary-key look-ups. Past ``COUNT_CAP`` matches the plain filter is
    kept (a common value is found early in any scan, and the ids would be incomplete).
    """
    ids = list(queryset.filter(**lookup).order_by().values_list("pk", flat=True)[:COUNT_CAP])
    return queryset.filter(pk__in=ids) if len(ids) < COUNT_CAP else queryset.filter(**lookup)


class CappedPaginator(Paginator):  # type: ignore[type-arg]
    """Counts at most ``COUNT_CAP`` rows (``SELECT COUNT(*) FROM (… LIMIT cap)``).

    On a table of millions an unbounded ``COUNT(*)`` is a full scan per page view; past the
    cap the list says "10,000+" and the operator narrows it with a filter.
    """

    cap = COUNT_CAP

    @cached_property
    def count(self) -> int:
        object_list: Any = self.object_list
        if hasattr(object_list, "query"):
            n: int = object_list.order_by()[: self.cap].count()
            return n
        return min(len(object_list), self.cap)

    @property
    def capped(self) -> bool:
        return self.count >= self.cap

    @property
    def count_label(self) -> str:
        return f"{self.count:,}+" if self.capped else f"{self.count:,}"


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """State changes go through the lifecycle, never through a form."""

    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = CappedPaginator
    list_per_page = 100
    #: Exact-match URL parameters the list takes besides its ``list_filter`` ones (links in).
    url_filters: tuple[str, ...] = ()

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only the list's own filters. Django would apply any lookup on the model's own
        columns typed into the URL: a view-only user could recover a live lease token with
        ``?lease_token__startswith=``, and ``?queue__regex=`` runs the pattern it is given.
        Anything else is a 400 (``DisallowedModelAdminLookup``)."""
        return lookup in self.filter_parameters()

    def filter_parameters(self) -> frozenset[str]:
        names = set(self.url_filters)
        for f in self.list_filter:
            if isinstance(f, str):  # a field's own filter: Django's exact and isnull params
                names.update((f"{f}__exact", f"{f}__isnull"))
            else:
                names.add(str(getattr(f, "parameter_name", None) or getattr(f, "field", "")))
        return frozenset(names)

    def action_checkbox(self, obj: Any) -> SafeString:
        """The row's selection box, without a template render per row (Django's renders one)."""
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" '
            'aria-label="Select this object for an action - {}">',
            ACTION_CHECKBOX_NAME,
            obj.pk,
            str(obj),
        )

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
