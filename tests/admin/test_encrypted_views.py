"""An encrypted job in the console: sealed without ``view_encrypted_job``, opened and audited
with it (docs/encryption.md#the-admin)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.contrib.auth.models import User
from django.test import Client
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import queue
from django_blamequeue.admin.operations import ADMIN_DECRYPT
from django_blamequeue.models import AuditEvent

from .conftest import staff

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

JOB = "/admin/django_blamequeue/job/"
CARD = "4111-1111-1111-1111"
Login = Callable[[User], Client]


@pytest.fixture
def failed_secret(settings: SettingsWrapper) -> str:
    """A job of the encrypted queue "vault" in the DLQ, its error text and its checkpoint
    quoting the card."""
    keys = {"ENCRYPTION_KEYS": [Fernet.generate_key().decode()], "ENCRYPT": ["vault"]}
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, **keys}
    job_id = queue.enqueue("vault", {"card": CARD}, max_attempts=1).job_id

    def decline(job: Any, ctx: Any) -> None:
        ctx.checkpoint({"charging": job.payload["card"]})
        raise ValueError(f"card {job.payload['card']} declined")

    assert queue.consume("vault", decline, poll_interval=0.05, burst=True).join(20)
    return job_id


def test_an_encrypted_job_page_says_encrypted_and_hides_its_values_without_the_permission(
    client_as: Login, failed_secret: str
) -> None:
    body = client_as(staff("viewer", "view_job")).get(f"{JOB}{failed_secret}/change/")
    page = body.content.decode()
    assert body.status_code == 200 and 'id="bq-encrypted"' in page
    assert CARD not in page and "declined" not in page
    assert not AuditEvent.objects.filter(action=ADMIN_DECRYPT).exists()


def test_the_permission_opens_an_encrypted_job_and_each_view_is_audited(
    client_as: Login, failed_secret: str
) -> None:
    client = client_as(staff("auditor", "view_job", "view_encrypted_job"))
    for _ in range(2):
        page = client.get(f"{JOB}{failed_secret}/change/").content.decode()
        assert CARD in page and f"ValueError: card {CARD} declined" in page
    views = AuditEvent.objects.filter(action=ADMIN_DECRYPT).order_by("id")
    assert [(e.job_id, e.user, e.queue) for e in views] == [(failed_secret, "auditor", "vault")] * 2


def test_the_dlq_list_never_shows_an_encrypted_jobs_values(
    client_as: Login, failed_secret: str
) -> None:
    client = client_as(staff("auditor", "view_job", "view_encrypted_job"))
    page = client.get(f"{JOB}dlq/", {"backend": "default", "queue": "vault"}).content.decode()
    assert failed_secret in page and "encrypted" in page and CARD not in page
