"""Schedules (docs/schedules.md) in the admin: cron or interval, timezone, enabled, next fire times.

Rows from ``SCHEDULES`` (``source="settings"``) and from the code (``@job(schedule=...)``,
``@periodic``: ``source="code"``) are shown read-only: the sweeper mirrors them into the table,
so an edit here would be undone. The list shows each schedule's overlap policy and how many
fires it skipped while its last run still waited or ran. Every add, change and delete is
audited with the acting user in the transaction that saves it (the admin's own).
"""

from __future__ import annotations

import zoneinfo
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin
from django.db import router, transaction
from django.forms.fields import InvalidJSONInput
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from django_blamequeue import audit
from django_blamequeue.admin import display
from django_blamequeue.admin.overview import Console
from django_blamequeue.core import schedules, validation
from django_blamequeue.core.schedules import cron_error
from django_blamequeue.exceptions import QueueError
from django_blamequeue.jobs import registry
from django_blamequeue.jobs.schedules import call_problem
from django_blamequeue.models import Schedule

ADMIN_SCHEDULE = audit.ADMIN_PREFIX + "schedule."
RULE_FIELDS = ("cron", "interval", "timezone")


class PayloadField(forms.JSONField):
    """JSON as every engine stores it: no NaN/Infinity, no NUL, nesting capped, and text that
    is not JSON (or too deep to parse) is a form error, never a crash."""

    def to_python(self, value: Any) -> Any:
        try:
            converted = super().to_python(value)
        except (ValueError, RecursionError):  # past int()'s digit limit, or too deep
            raise forms.ValidationError("Enter a valid JSON.", code="invalid") from None
        if (why := validation.json_problem(converted)) is not None:
            raise forms.ValidationError(f"The payload {why}.", code="invalid")
        return converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except (ValueError, RecursionError):
            return InvalidJSONInput(data)


class ScheduleForm(forms.ModelForm):  # type: ignore[type-arg]
    payload = PayloadField(required=False)

    class Meta:
        model = Schedule
        fields = (
            "name",
            "job",
            "queue",
            "payload",
            "cron",
            "interval",
            "timezone",
            "enabled",
            "backend",
            "overlap",
            "expires",
        )
        help_texts = {
            "cron": "5 fields: minute hour day month weekday, e.g. */5 * * * *",
            "timezone": "IANA name, e.g. Europe/Paris; cron times are wall-clock times there",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "overlap" in self.fields:  # a viewer's form has none: every field is read-only
            self.fields["overlap"].required = False  # left out: the default, "skip"

    def clean_overlap(self) -> str:
        return str(self.cleaned_data.get("overlap") or "skip")

    def clean_job(self) -> str:
        job = str(self.cleaned_data["job"]).strip()
        if registry.get(job) is None:
            raise forms.ValidationError(f"no job is registered as {job!r}")
        return job

    def clean_cron(self) -> str:
        cron = " ".join(str(self.cleaned_data.get("cron") or "").split())
        if cron and (why := cron_error(cron)):
            raise forms.ValidationError(f"{cron!r} {why}")
        return cron

    def clean_timezone(self) -> str:
        tz = str(self.cleaned_data["timezone"]).strip() or "UTC"
        try:
            zoneinfo.ZoneInfo(tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise forms.ValidationError(f"{tz!r} is not an IANA time zone") from None
        return tz

    def clean_interval(self) -> float | None:
        interval = self.cleaned_data.get("interval")
        if interval is None:
            return None
        try:
            return validation.interval(interval)
        except QueueError:
            raise forms.ValidationError(
                f"seconds from {validation.MIN_INTERVAL:g} to {validation.MAX_SECONDS:,}"
            ) from None

    def clean_expires(self) -> float | None:
        expires = self.cleaned_data.get("expires")
        if expires is not None and not 0 < expires <= validation.MAX_SECONDS:
            raise forms.ValidationError(f"seconds > 0 and ≤ {validation.MAX_SECONDS:,}")
        return expires

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if bool(data.get("cron")) == (data.get("interval") is not None):
            raise forms.ValidationError("Give exactly one of cron and interval.")
        definition = registry.get(str(data.get("job") or ""))
        if definition is not None:
            why = call_problem({"payload": data.get("payload")}, definition)
            if why is not None:  # it would fail at every fire: refused now
                self.add_error("payload", f"This schedule {why}")
        return data


def _tabs(request: HttpRequest) -> dict[str, Any]:

    return {"tabs": Console.tabs(request, "schedules")}


def zone_of(s: Schedule) -> zoneinfo.ZoneInfo | None:
    """The row's time zone; None when this host's tz database lacks it (moved to a host with
    another tz database, or a name retired): that row shows so, the page still renders."""
    try:
        return zoneinfo.ZoneInfo(s.timezone or "UTC")
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None


def upcoming(s: Schedule, now: datetime, count: int = 3) -> list[datetime]:
    """The next fire times from now; an interval counts from its last fire. A row whose rule
    cannot be computed (saved before its interval was bounded, a time zone this host does not
    know) has none, not an error page."""
    try:
        return schedules.upcoming(
            cron=s.cron,
            interval=s.interval,
            tz=s.timezone,
            last_fired=s.last_fired_at,
            now=now,
            count=count,
        )
    except (ArithmeticError, ValueError, zoneinfo.ZoneInfoNotFoundError):
        return []  # ZeroDivisionError, OverflowError, a bad cron, an unknown time zone


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = ScheduleForm
    list_display = (
        "name",
        "job",
        "queue",
        "rule",
        "timezone",
        "enabled",
        "source",
        "overlapping",
        "last_fired",
        "next_fire",
    )
    list_filter = ("enabled", "source", "overlap")
    search_fields = ("name", "job")
    readonly_fields = ("source", "last_fired", "next_fire_times", "skipped", "last_skipped_at")
    show_facets = admin.ShowFacets.NEVER

    class Media:
        css = {"all": ("django_blamequeue/admin.css",)}

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return super().changelist_view(request, {**_tabs(request), **(extra_context or {})})

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = {**_tabs(request), **(extra_context or {})}
        return super().changeform_view(request, object_id, form_url, context)

    def get_fields(  # type: ignore[override]
        self, request: HttpRequest, obj: Schedule | None = None
    ) -> list[str]:
        fields = list(ScheduleForm.Meta.fields)
        shown = ["source", "last_fired", "next_fire_times", "skipped", "last_skipped_at"]
        return fields + (shown if obj else [])

    def has_change_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        return (obj is None or obj.source == "admin") and super().has_change_permission(
            request, obj
        )

    def has_delete_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        return (obj is None or obj.source == "admin") and super().has_delete_permission(
            request, obj
        )

    @admin.display(description="overlap")
    def overlapping(self, s: Schedule) -> str:
        """``skip``, with the fires skipped while the last run still waited or ran."""
        return f"{s.overlap} · {s.skipped} skipped" if s.skipped else s.overlap

    @admin.display(description="rule")
    def rule(self, s: Schedule) -> str:
        return f"every {s.interval:g} s" if s.interval else f"cron {s.cron}"

    @admin.display(description="last fired")
    def last_fired(self, s: Schedule) -> str:
        return display.relative(s.last_fired_at)

    @admin.display(description="next")
    def next_fire(self, s: Schedule) -> str:
        if not s.enabled:
            return "disabled"
        if zone_of(s) is None:
            return f"unknown time zone {s.timezone!r}"
        fires = upcoming(s, timezone.now(), 1)
        return display.relative(fires[0]) if fires else "–"

    @admin.display(description="next fire times")
    def next_fire_times(self, s: Schedule) -> str:
        now = timezone.now()
        zone = zone_of(s)
        if zone is None:
            return format_html(
                "{} is not a time zone this host knows (its tz database lacks it): this "
                "schedule does not fire until it is given one that exists.",
                repr(s.timezone),
            )
        return format_html(
            "<ul>{}</ul>",
            format_html_join(
                "",
                "<li>{} ({}, {})</li>",
                (
                    (
                        f.strftime("%Y-%m-%d %H:%M:%S UTC"),
                        f.astimezone(zone).strftime(f"%Y-%m-%d %H:%M %Z in {s.timezone}"),
                        display.relative(f, now),
                    )
                    for f in upcoming(s, now, 5)
                ),
            ),
        )

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        if not change:
            obj.source = "admin"
        if not change or any(f in form.changed_data for f in RULE_FIELDS):
            obj.last_fired_at = timezone.now()  # anchor: the first fire is the next one
        with transaction.atomic(using=router.db_for_write(Schedule)):
            super().save_model(request, obj, form, change)
            self._audit(
                request, obj, "change" if change else "add", changed=sorted(form.changed_data)
            )

    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        with transaction.atomic(using=router.db_for_write(Schedule)):
            self._audit(request, obj, "delete")
            super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        with transaction.atomic(using=router.db_for_write(Schedule)):
            for obj in queryset:
                self._audit(request, obj, "delete")
            super().delete_queryset(request, queryset)

    @staticmethod
    def _audit(request: HttpRequest, s: Schedule, verb: str, **data: Any) -> None:
        audit.record(
            [
                audit.Event(
                    action=ADMIN_SCHEDULE + verb,
                    queue=s.queue or None,
                    backend=s.backend or None,
                    user=request.user.get_username(),
                    data={
                        "schedule": s.name,
                        "job": s.job,
                        "cron": s.cron,
                        "interval": s.interval,
                        "timezone": s.timezone,
                        "enabled": s.enabled,
                        **data,
                    },
                )
            ],
            using=router.db_for_write(Schedule),
        )
