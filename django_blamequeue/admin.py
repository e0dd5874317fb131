"""Read-only admin for the local backend's tables (the operator's console comes later).

State changes go through the lifecycle: the only actions are "retry from the DLQ" and
"cancel", each behind its own permission and audited with the acting user.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from . import audit
from .api import queue
from .models import AuditEvent, FlowDependency, Job, OutboxEntry


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _audit_admin(request: HttpRequest, verb: str, job: Job, ok: bool) -> None:
    audit.record(
        [audit.Event(action=audit.ADMIN_PREFIX + verb, job_id=job.id, queue=job.queue,
                     user=request.user.get_username(), data={"ok": ok})],  # fmt: skip
        using="default",
    )


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ("id", "name", "queue", "state", "progress_bar", "attempts_of", "priority",
                    "available_at", "finished_at")  # fmt: skip
    list_filter = ("state", "queue", "name", "classification")
    search_fields = ("=id", "=dedupe_key", "=trace_id", "=flow_id")
    show_full_result_count = False
    actions = ("retry_from_dlq", "cancel_jobs")
    exclude = ("payload", "result", "lease_token")
    readonly_fields = ("payload_text", "result_text")

    @admin.display(description="progress")
    def progress_bar(self, job: Job) -> str:
        return format_html(
            '<div style="width:80px;background:#eee;border-radius:3px">'
            '<div style="width:{}%;background:#79aec8;height:8px;border-radius:3px"></div></div>',
            job.progress,
        )

    @admin.display(description="attempts")
    def attempts_of(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    @admin.display(description="payload")
    def payload_text(self, job: Job) -> str:
        info = queue.get_job(job.id)
        return format_html("<pre>{}</pre>", repr(info.payload) if info else "")

    @admin.display(description="result")
    def result_text(self, job: Job) -> str:
        info = queue.get_job(job.id)
        return format_html("<pre>{}</pre>", repr(info.result) if info else "")

    @admin.action(description="Retry selected jobs from the DLQ", permissions=["retry"])
    def retry_from_dlq(self, request: HttpRequest, jobs: QuerySet[Job]) -> None:
        n = 0
        for job in jobs.filter(state="failed"):
            ok = queue.dlq_retry(job.id)
            _audit_admin(request, "retry", job, ok)
            n += ok
        self.message_user(request, f"{n} job(s) back to pending", messages.SUCCESS)

    @admin.action(description="Cancel selected jobs", permissions=["cancel"])
    def cancel_jobs(self, request: HttpRequest, jobs: QuerySet[Job]) -> None:
        n = 0
        for job in jobs:
            ok = queue.cancel(job.id)
            _audit_admin(request, "cancel", job, ok)
            n += ok
        self.message_user(request, f"{n} job(s) cancelled", messages.SUCCESS)

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("django_blamequeue.retry_job"))  # type: ignore[union-attr]

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("django_blamequeue.cancel_job"))  # type: ignore[union-attr]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_view_permission(request, obj)


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "action", "job_id", "queue", "attempt", "user")
    list_filter = ("action", "queue", "user")
    search_fields = ("=job_id",)
    show_full_result_count = False


@admin.register(FlowDependency)
class FlowDependencyAdmin(ReadOnlyAdmin):
    list_display = ("flow_id", "kind", "job_id", "depends_on_id", "key", "status")
    list_filter = ("kind", "status")
    search_fields = ("=flow_id", "=job_id", "=depends_on_id")


@admin.register(OutboxEntry)
class OutboxEntryAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "backend", "job_id", "attempts", "created_at", "sent_at")
    list_filter = ("kind", "backend")
