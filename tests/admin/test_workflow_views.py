"""The workflow actions of the job page refuse staff without ``retry_job`` and bad input
(docs/workflows.md#operating-workflows)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.test import Client

from django_blamequeue.models import AuditEvent, WorkflowEvent

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

JOB = "01JZ8Q2W6V1G5M4N3B2C1X0Y9Z"
BASE = f"/admin/django_blamequeue/job/{JOB}/workflow/"


def test_staff_without_retry_permission_cannot_rerun_or_send_events(
    client_as: Callable[[User], Client], viewer: User
) -> None:
    client = client_as(viewer)
    assert client.post(BASE + "rerun/", {"from_step": "1"}).status_code == 403
    assert client.post(BASE + "send-event/", {"name": "paid"}).status_code == 403
    assert not WorkflowEvent.objects.exists()


def test_bad_input_is_a_message_and_writes_nothing(admin_client_: Client) -> None:
    page = admin_client_.post(BASE + "send-event/", {"name": "paid", "payload": "{nope"})
    assert page.status_code == 302
    assert [str(m) for m in get_messages(page.wsgi_request)][-1].startswith(
        "The payload is not JSON"
    )
    rerun = admin_client_.post(BASE + "rerun/", {"from_step": "2"})
    assert [str(m) for m in get_messages(rerun.wsgi_request)][-1] == f"no job {JOB}"
    assert admin_client_.get(BASE + "rerun/").status_code == 405  # POST only
    assert not WorkflowEvent.objects.exists() and not AuditEvent.objects.exists()
