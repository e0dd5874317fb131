"""The admin answers bad input with a form error, a clamped page or a 404,
never a 500; purge says what it deletes."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_blamequeue.core.validation import MAX_SECONDS
from django_blamequeue.models import Job, Schedule
from tests.admin.conftest import staff
from tests.admin.factories import make_failed, make_jobs

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

JOB = "/admin/django_blamequeue/job/"
DLQ = f"{JOB}dlq/"
SCHEDULES = "/admin/django_blamequeue/schedule/"


@pytest.fixture
def admin(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def schedule_form(**changes: Any) -> dict[str, Any]:
    form = {
        "name": "tick",
        "job": "demo.jobs.send_email",
        "queue": "",
        "payload": '{"to": "x"}',
        "cron": "",
        "interval": "60",
        "timezone": "UTC",
        "enabled": "on",
        "backend": "",
    }
    return {**form, **changes}


def text(response: Any) -> str:
    return str(response.content.decode())


# -- schedules -----------------------------------------------------------------------------
def test_a_schedule_interval_outside_1_ms_to_100_years_is_a_form_error(admin: Client) -> None:
    for interval in ["1e-9", "0.0009", "1e308", str(MAX_SECONDS + 1), "0", "-5"]:
        response = admin.post(f"{SCHEDULES}add/", schedule_form(interval=interval))
        assert response.status_code == 200, interval
        assert "seconds from 0.001 to" in text(response), interval
    assert not Schedule.objects.exists()
    assert admin.get(SCHEDULES).status_code == 200


def test_the_bounds_of_a_schedule_interval_are_accepted(admin: Client) -> None:
    for name, interval in (("fast", "0.001"), ("slow", str(MAX_SECONDS))):
        response = admin.post(f"{SCHEDULES}add/", schedule_form(name=name, interval=interval))
        assert response.status_code == 302, text(response)
    listing = admin.get(SCHEDULES)
    assert listing.status_code == 200 and "every 0.001 s" in text(listing)


NOT_STORABLE = {
    "NaN": "NaN",
    "Infinity": '{"x": [1, Infinity]}',
    "NUL in a string": '"a\\u0000b"',
    "NUL in a key": '{"k\\u0000": 1}',
    "30k deep": "[" * 30_000 + "]" * 30_000,
    "102 deep": "[" * 102 + "]" * 102,
    "5000 digits": "9" * 5000,
}


def test_a_schedule_payload_no_engine_stores_is_a_form_error(admin: Client) -> None:
    for label, payload in NOT_STORABLE.items():
        response = admin.post(f"{SCHEDULES}add/", schedule_form(payload=payload))
        assert response.status_code == 200 and "errorlist" in text(response), label
    assert not Schedule.objects.exists()


def test_schedule_rows_saved_before_the_bounds_still_list_and_open(admin: Client) -> None:
    tiny = Schedule.objects.create(name="tiny", job="demo.jobs.send_email", interval=1e-9)
    huge = Schedule.objects.create(name="huge", job="demo.jobs.send_email", interval=1e308)
    assert admin.get(SCHEDULES).status_code == 200
    for s in (tiny, huge):
        assert admin.get(f"{SCHEDULES}{s.pk}/change/").status_code == 200


# -- the DLQ and purge ---------------------------------------------------------------------
def test_a_dlq_page_past_the_end_shows_the_last_page(
    admin: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_blamequeue.admin import overview

    monkeypatch.setattr(overview, "DLQ_PER_PAGE", 2)
    ids = make_failed("hooks", 5)
    for page in [str(10**20), "99999999999999999999999", "4"]:
        response = admin.get(f"{DLQ}?queue=hooks&page={page}")
        assert response.status_code == 200, page
        body = text(response)
        assert "page 3 of 3" in body and f'data-job-id="{ids[4]}"' in body, page
    for page in ["-3", "1e20", "x", "9" * 5000]:
        response = admin.get(f"{DLQ}?queue=hooks&page={page}")
        assert response.status_code == 200 and "page 1 of 3" in text(response), page


def test_the_purge_confirmation_says_jobs_arriving_after_it_are_kept(client: Client) -> None:
    make_jobs("q", 2)
    client.force_login(staff("purger", "view_job", "purge_queue"))
    body = text(client.get(f"{JOB}purge/?queue=q"))
    assert "so are jobs enqueued after this page was shown" in body


# -- ids that cannot be ids ----------------------------------------------------------------
def test_a_job_page_for_an_id_that_cannot_be_one_is_404(admin: Client) -> None:
    make_jobs("q", 1)
    for job_id in ["a%00b", "x" * 300]:
        assert admin.get(f"{JOB}{job_id}/change/").status_code == 404, job_id
        assert admin.post(f"{JOB}{job_id}/cancel/").status_code == 404, job_id
        assert admin.get(f"{JOB}flow/{job_id}/").status_code == 404, job_id


def test_dlq_retry_of_ids_that_cannot_be_ids_retries_nothing(admin: Client) -> None:
    (failed,) = make_failed("hooks", 1)
    form = {"backend": "default", "queue": "hooks", "job_id": ["", "a\x00b", "x" * 300]}
    response = admin.post(f"{DLQ}retry/", form, follow=True)
    assert response.status_code == 200 and "nothing retried" in text(response)
    assert Job.objects.get(pk=failed).state == "failed"
