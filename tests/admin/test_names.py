"""The admin names every model the way English does, and the migrations carry those names."""

from __future__ import annotations

import io

import pytest
from django.apps import apps
from django.core.management import call_command

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("model", "singular", "plural"),
    [
        ("Job", "job", "jobs"),
        ("FlowDependency", "flow dependency", "flow dependencies"),
        ("OutboxEntry", "outbox entry", "outbox entries"),
        ("AuditEvent", "audit event", "audit events"),
        ("Schedule", "schedule", "schedules"),
    ],
)
def test_each_model_has_its_english_singular_and_plural(
    model: str, singular: str, plural: str
) -> None:
    meta = apps.get_model("django_blamequeue", model)._meta
    assert (str(meta.verbose_name), str(meta.verbose_name_plural)) == (singular, plural)


def test_the_models_need_no_migration_that_is_not_committed() -> None:
    out = io.StringIO()
    call_command("makemigrations", "django_blamequeue", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()
