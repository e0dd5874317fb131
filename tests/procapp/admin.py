"""A user's ModelAdmin with the job timeline (tests/admin/test_provenance.py)."""

from django.contrib import admin

from django_blamequeue.admin import JobTimelineMixin

from .models import Write


@admin.register(Write)
class WriteAdmin(JobTimelineMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("job_id", "attempt", "tag")
