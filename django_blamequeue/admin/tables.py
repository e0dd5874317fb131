"""Read-only views of the bookkeeping tables (flow edges, outbox), for debugging."""

from __future__ import annotations

from django.contrib import admin

from django_blamequeue.admin.base import ReadOnlyAdmin
from django_blamequeue.models import FlowDependency, OutboxEntry


@admin.register(FlowDependency)
class FlowDependencyAdmin(ReadOnlyAdmin):
    list_display = ("flow_id", "kind", "job_id", "depends_on_id", "key", "status")
    list_filter = ("kind", "status")
    search_fields = ("=flow_id", "=job_id", "=depends_on_id")
    ordering = ("-id",)


@admin.register(OutboxEntry)
class OutboxEntryAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "backend", "job_id", "attempts", "created_at", "sent_at")
    list_filter = ("kind", "backend")
    ordering = ("-id",)
