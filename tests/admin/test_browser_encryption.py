"""An encrypted job's page in headless Chromium: sealed for a viewer, opened (and audited)
for a user holding ``view_encrypted_job`` (docs/encryption.md#the-admin)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from cryptography.fernet import Fernet
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import queue
from django_blamequeue.admin.operations import ADMIN_DECRYPT
from django_blamequeue.models import AuditEvent

from .conftest import staff
from .test_browser import browser, login, page  # noqa: F401 - the fixtures

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")
CARD = "4111-1111-1111-1111"


def test_an_encrypted_job_is_sealed_for_a_viewer_and_opened_for_the_permitted(
    page: Page,  # noqa: F811
    settings: SettingsWrapper,
) -> None:
    keys = {"ENCRYPTION_KEYS": [Fernet.generate_key().decode()], "ENCRYPT": ["vault"]}
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, **keys}
    job_id = queue.enqueue("vault", {"card": CARD}).job_id
    url = f"/admin/django_blamequeue/job/{job_id}/change/"
    staff("viewer", "view_job")
    staff("auditor", "view_job", "view_encrypted_job")

    login(page, "viewer", url)
    assert "Encrypted at rest" in page.locator("#bq-encrypted").inner_text()
    assert page.locator("#bq-payload").count() == 0 and CARD not in page.content()

    page.context.clear_cookies()
    login(page, "auditor", url)
    assert CARD in page.locator("#bq-payload").inner_text()
    assert "audited" in page.locator("#bq-encrypted").inner_text()
    views: Any = AuditEvent.objects.filter(action=ADMIN_DECRYPT)
    assert [(e.user, e.job_id) for e in views] == [("auditor", job_id)]
