"""The audit log: read-only, newest first, filterable by action, queue, job, user and backend."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from django_blamequeue.admin import display
from django_blamequeue.admin.base import ReadOnlyAdmin, listing_database, selected_backend
from django_blamequeue.admin.filters import (
    ActionFilter,
    BackendFilter,
    JobIdFilter,
    QueueFilter,
    UserFilter,
)
from django_blamequeue.admin.overview import Console
from django_blamequeue.models import AuditEvent

DATA_CHARS = 160


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "when",
        "action_name",
        "job_link",
        "queue",
        "attempt",
        "user",
        "data_summary",
    )
    list_display_links = ("id",)
    list_filter = (BackendFilter, ActionFilter, QueueFilter, UserFilter, JobIdFilter)
    ordering = ("-id",)
    sortable_by = ("id",)
    actions = None
    change_list_template = "admin/django_blamequeue/auditevent/change_list.html"
    fields = ("action", "created_at", "job_id", "queue", "backend", "attempt", "user", "data_text")
    readonly_fields = fields

    class Media:
        css = {"all": ("django_blamequeue/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[AuditEvent]:
        return (
            super()
            .get_queryset(request)
            .using(listing_database(selected_backend(request), AuditEvent))
        )

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:

        context = {
            "tabs": Console.tabs(request, "audit"),
            "title": "Audit log",
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    @admin.display(description="when")
    def when(self, event: AuditEvent) -> str:
        return display.relative(event.created_at)

    @admin.display(description="action")
    def action_name(self, event: AuditEvent) -> str:
        return event.action.removeprefix("system.queue.")

    @admin.display(description="job")
    def job_link(self, event: AuditEvent) -> str:
        if not event.job_id:
            return ""
        target = reverse("admin:django_blamequeue_job_change", args=[event.job_id])
        query = urlencode({"backend": event.backend}) if event.backend else ""
        return format_html(
            '<a href="{}{}">{}</a>', target, f"?{query}" if query else "", event.job_id
        )

    @admin.display(description="data")
    def data_summary(self, event: AuditEvent) -> str:
        text = json.dumps(event.data, sort_keys=True, ensure_ascii=False, default=str)
        return format_html('<code class="bq-data">{}</code>', display.short(text, DATA_CHARS))

    @admin.display(description="data")
    def data_text(self, event: AuditEvent) -> str:
        return format_html("<pre>{}</pre>", display.pretty_json(event.data))
