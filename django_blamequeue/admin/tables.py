"""Read-only views of the bookkeeping tables (flow edges, outbox), for debugging.

They are internal: left out of the admin index (no one looks for them there), reachable by
their URLs (``/admin/django_blamequeue/outboxentry/``) for whoever debugs a flow or the relay.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from django_blamequeue.admin.base import ReadOnlyAdmin
from django_blamequeue.models import FlowDependency, OutboxEntry


class InternalTable(ReadOnlyAdmin):
    """Not in the admin index; its pages stay where they are."""

    def get_model_perms(self, request: HttpRequest) -> dict[str, bool]:
        return {}


@admin.register(FlowDependency)
class FlowDependencyAdmin(InternalTable):
    list_display = ("flow_id", "kind", "job_id", "depends_on_id", "key", "status")
    list_filter = ("kind", "status")
    search_fields = ("=flow_id", "=job_id", "=depends_on_id")
    ordering = ("-id",)


@admin.register(OutboxEntry)
class OutboxEntryAdmin(InternalTable):
    list_display = ("id", "kind", "backend", "job_id", "attempts", "created_at", "sent_at")
    list_filter = ("kind", "backend")
    ordering = ("-id",)
