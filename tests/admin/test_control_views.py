"""The control plane in the console, through Django's test client: pause / resume buttons on
the overview, the limits page, the Workers page; permissions, POST + CSRF, audited with the
acting user in the change's transaction."""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import QueueLimits, queue
from django_blamequeue.audit import LIMITS, PAUSE, RESUME
from django_blamequeue.backends import get_backend
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.models import AuditEvent, WorkerRecord
from django_blamequeue.testing import wait_until
from django_blamequeue.worker import fleet

from .conftest import staff
from .factories import XSS, make_jobs

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

JOB = "/admin/django_blamequeue/job/"
OVERVIEW = f"{JOB}overview/"
PAUSE_URL = f"{JOB}queues/pause/"
RESUME_URL = f"{JOB}queues/resume/"
LIMITS_URL = f"{JOB}queues/limits/"
WORKERS = f"{JOB}workers/"
Login = Callable[[User], Client]


def text(response: Any) -> str:
    return response.content.decode()


def row(body: str, q: str) -> str:
    found = re.search(rf'<tr data-backend="default" data-queue="{q}"[^>]*>(.*?)</tr>', body, re.S)
    assert found is not None, body
    return found.group(1)


def test_the_overview_shows_paused_queues_and_limits_at_a_glance(admin_client_: Client) -> None:
    make_jobs("emails", 2)
    queue.pause("emails", reason="smtp down")
    queue.set_limits("hooks", concurrency=3, key_rate_limit=(5, 1))  # no jobs yet: listed too
    body = text(admin_client_.get(OVERVIEW))
    assert "1 queue paused" in body
    emails = row(body, "emails")
    assert "‖ paused" in emails and "smtp down" in emails and "Resume" in emails
    hooks = row(body, "hooks")
    assert "concurrency 3 · rate per key 5/1 s" in hooks and 'name="reason"' in hooks


def test_pause_and_resume_are_post_only_need_their_permission_and_are_audited(
    client_as: Login, root: User
) -> None:
    make_jobs("emails", 1)
    viewer = client_as(staff("viewer", "view_job"))
    assert viewer.post(PAUSE_URL, {"queue": "emails"}).status_code == 403
    assert not queue.is_paused("emails")
    operator = client_as(staff("ops", "view_job", "pause_queue"))
    assert operator.get(PAUSE_URL + "?queue=emails").status_code == 405
    response = operator.post(PAUSE_URL, {"queue": "emails", "reason": "provider down"})
    assert response.status_code == 302 and queue.is_paused("emails")
    assert queue.control("emails").paused_by == "ops"
    assert operator.post(RESUME_URL, {"queue": "emails"}).status_code == 302
    assert not queue.is_paused("emails")
    events = [(e.action, e.user, e.data) for e in AuditEvent.objects.order_by("id")]
    assert events == [(PAUSE, "ops", {"reason": "provider down"}), (RESUME, "ops", {})]


def test_pause_needs_a_csrf_token() -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_superuser("r", "r@example.com", "pw"))
    assert client.post(PAUSE_URL, {"queue": "emails"}).status_code == 403
    assert not queue.is_paused("emails")


def test_a_bad_queue_name_is_a_400_and_pauses_nothing(admin_client_: Client) -> None:
    assert admin_client_.post(PAUSE_URL, {"queue": ""}).status_code == 400
    assert queue.controls() == []


def test_the_limits_page_shows_and_saves_limits_with_its_permission(
    client_as: Login, settings: Any
) -> None:
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "QUEUES": {"emails": {"CONCURRENCY": 4}}}
    viewer = client_as(staff("viewer", "view_job"))
    body = text(viewer.get(LIMITS_URL + "?queue=emails"))
    assert "concurrency 4" in body and 'BLAMEQUEUE["QUEUES"]' in body
    assert 'id="bq-limits-form"' not in body  # no change permission: no form
    assert viewer.post(LIMITS_URL, {"queue": "emails", "concurrency": "9"}).status_code == 403
    editor = client_as(staff("editor", "view_job", "change_queue_limits"))
    response = editor.post(
        LIMITS_URL,
        {
            "queue": "emails",
            "concurrency": "2",
            "key_concurrency": "",
            "rate_max": "20",
            "rate_per": "1",
        },
    )
    assert response.status_code == 302
    assert queue.get_limits("emails") == QueueLimits(concurrency=2, rate_limit=(20, 1.0))
    (event,) = AuditEvent.objects.filter(action=LIMITS)
    assert (event.user, event.data) == ("editor", {"limits": "concurrency 2 · rate 20/1 s"})
    editor.post(LIMITS_URL, {"queue": "emails", "clear": "1"})
    assert queue.control("emails").source == "settings"


def test_the_limits_page_saves_key_weights_and_shows_them_in_its_form(
    admin_client_: Client,
) -> None:
    response = admin_client_.post(
        LIMITS_URL, {"queue": "emails", "concurrency": "6", "key_weights": "vip:*=5, team:*=2"}
    )
    assert response.status_code == 302
    assert queue.get_limits("emails") == QueueLimits(
        concurrency=6, key_weights=(("vip:*", 5), ("team:*", 2))
    )
    body = text(admin_client_.get(LIMITS_URL + "?queue=emails"))
    assert 'value="vip:*=5, team:*=2"' in body


@pytest.mark.parametrize(
    "form",
    [
        {"concurrency": "0"},
        {"concurrency": "many"},
        {"rate_max": "5"},
        {"rate_max": "5", "rate_per": "-1"},
        {"key_weights": "vip:*=0"},
        {"key_weights": "vip:*"},
    ],
)
def test_bad_limits_are_shown_on_the_page_and_nothing_is_written(
    admin_client_: Client, form: dict[str, str]
) -> None:
    body = text(admin_client_.post(LIMITS_URL, {"queue": "emails", **form}))
    assert 'id="bq-limits-error"' in body
    assert queue.control("emails").version == 0
    assert not AuditEvent.objects.exists()


def test_the_workers_page_lists_live_workers_with_links_to_their_jobs_and_greys_gone_ones(
    admin_client_: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fleet, "HEARTBEAT", 0.1)
    release = threading.Event()
    job_id = queue.enqueue("emails", {}).job_id
    consumer = queue.consume("emails", lambda job, ctx: release.wait(20), poll_interval=0.05)
    assert wait_until(lambda: [w.running for w in queue.workers()] == [(job_id,)], 10)
    body = text(admin_client_.get(WORKERS))
    assert "1 live worker." in body
    assert f'href="{JOB}{job_id}/change/?backend=default"' in body
    overview = text(admin_client_.get(OVERVIEW))
    assert re.search(r'data-backend="default">[^·]*data-workers="1"', overview), overview
    release.set()
    consumer.cancel()
    assert consumer.join(10)
    WorkerRecord.objects.update(state="running", last_seen="2000-01-01T00:00:00Z")  # it died
    body = text(admin_client_.get(WORKERS))
    assert 'data-state="gone"' in body and "bq-gone" in body and "0 live workers." in body
    overview = text(admin_client_.get(OVERVIEW))
    assert re.search(r'data-backend="default">[^·]*data-workers="0"', overview), overview


def test_a_pause_reason_is_escaped(admin_client_: Client) -> None:
    make_jobs("emails", 1)
    admin_client_.post(PAUSE_URL, {"queue": "emails", "reason": XSS})
    body = text(admin_client_.get(OVERVIEW))
    assert XSS not in body and "&lt;script&gt;" in body


def test_a_stalled_worker_is_shown_stalled_on_the_workers_page_and_by_blamequeue_workers(
    admin_client_: Client, monkeypatch: pytest.MonkeyPatch, settings: SettingsWrapper
) -> None:
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "WORKER_STALLED_AFTER": 0.5}
    monkeypatch.setattr(fleet, "HEARTBEAT", 0.1)
    engine = get_backend("default")  # the instance the worker gets, under these settings

    def down(*args: Any, **kwargs: Any) -> Any:  # the engine refuses every claim
        raise QueueError(ErrorCode.BACKEND_UNAVAILABLE, "the engine is down (test)")

    for verb in ("claim", "apply_and_claim"):
        monkeypatch.setattr(engine, verb, down)
    make_jobs("emails", 2)  # due, and nothing claims them
    consumer = queue.consume("emails", lambda job, ctx: None, poll_interval=0.1)
    try:
        me = consumer.registration.worker_id
        assert wait_until(
            lambda: [w.state for w in queue.workers() if w.worker_id == me] == ["stalled"], 15
        )
        body = text(admin_client_.get(WORKERS))
        assert f'data-worker="{me}" data-state="stalled"' in body
        assert '<span class="bq-worker-state">stalled</span>' in body
        out = io.StringIO()
        call_command("blamequeue", "workers", stdout=out)
        (line,) = [x for x in out.getvalue().splitlines() if "stalled" in x]
        assert line.lstrip().startswith("⚠"), line
    finally:
        consumer.cancel()
        assert consumer.join(10)
