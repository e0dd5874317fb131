"""The control plane's screens in a real headless Chromium: pause and resume from the
overview, the limits page, the Workers page (fixtures of test_browser.py)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from django.utils import timezone

from django_blamequeue import QueueLimits, queue
from django_blamequeue.models import AuditEvent, WorkerRecord
from django_blamequeue.testing import wait_until
from django_blamequeue.worker import fleet

from .factories import make_jobs
from .test_browser import OVERVIEW, browser, login, message, page, root  # noqa: F401

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")
JOB = "/admin/django_blamequeue/job/"


def test_pause_a_queue_with_a_reason_then_resume_it(page: Page) -> None:  # noqa: F811
    make_jobs("emails", 3)
    root()
    login(page, "root")
    row = page.locator('tr[data-queue="emails"]')
    row.locator("details.bq-pause-box summary").click()
    row.locator('input[name="reason"]').fill("smtp provider down")
    row.locator("button.bq-pause").click()
    assert "Paused emails" in message(page)
    row = page.locator('tr[data-queue="emails"]')
    assert row.get_attribute("data-paused") == "1"
    assert "smtp provider down" in row.locator("td.bq-control").inner_text()
    assert page.locator("#bq-paused-count").inner_text().startswith("‖ 1 queue paused")
    assert queue.is_paused("emails")
    row.locator("button.bq-resume").click()
    assert "Resumed emails" in message(page)
    assert page.locator('tr[data-queue="emails"]').get_attribute("data-paused") is None
    assert [e.user for e in AuditEvent.objects.order_by("id")] == ["root", "root"]


def test_edit_a_queues_limits_and_see_a_bad_value_refused(page: Page) -> None:  # noqa: F811
    make_jobs("emails", 1)
    root()
    login(page, "root")
    page.locator('tr[data-queue="emails"] a.bq-limits').click()
    page.wait_for_url("**/queues/limits/**")
    assert page.locator("#bq-limits-in-force").inner_text() == "none"
    page.fill("#id_rate_max", "20")  # a rate without its seconds: refused by the server
    page.click("#bq-limits-save")
    assert "needs both" in page.locator("#bq-limits-error").inner_text()
    assert queue.control("emails").version == 0
    page.fill("#id_concurrency", "3")
    page.fill("#id_key_concurrency", "1")
    page.fill("#id_rate_max", "20")
    page.fill("#id_rate_per", "1")
    page.click("#bq-limits-save")
    assert "Limits of emails saved" in message(page)
    assert page.locator("#bq-limits-in-force").inner_text() == (
        "concurrency 3 · per key 1 · rate 20/1 s"
    )
    assert queue.get_limits("emails") == QueueLimits(
        concurrency=3, key_concurrency=1, rate_limit=(20, 1.0)
    )
    page.click("#bq-limits-clear")
    assert page.locator("#bq-limits-in-force").inner_text() == "none"


def test_the_workers_page_links_running_jobs_and_greys_gone_workers(
    page: Page,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fleet, "HEARTBEAT", 0.1)
    two_minutes_ago = timezone.now() - timedelta(minutes=2)  # gone, not yet pruned
    WorkerRecord.objects.create(
        worker_id="old-host:99:dead",
        backend="default",
        host="old-host",
        pid=99,
        queues=["emails"],
        started_at=two_minutes_ago,
        last_seen=two_minutes_ago,
    )
    release = threading.Event()
    job_id = queue.enqueue("emails", {}).job_id
    consumer = queue.consume("emails", lambda job, ctx: release.wait(30), poll_interval=0.05)
    try:
        assert wait_until(lambda: (job_id,) in [w.running for w in queue.workers()], 10)
        root()
        login(page, "root", f"{JOB}workers/")
        assert page.locator("#bq-workers-live").inner_text().startswith("1 live worker")
        gone = page.locator('tr[data-state="gone"]')
        assert gone.count() == 1
        assert float(gone.evaluate("e => getComputedStyle(e.querySelector('td')).opacity")) < 1
        live = page.locator('tr[data-state="running"]')
        live.locator(f'a:has-text("{job_id}")').click()
        page.wait_for_url(f"**/{job_id}/change/**")
        assert page.locator("#content-main").get_attribute("data-state") == "inflight"
    finally:
        release.set()
        consumer.cancel()
        consumer.join(10)
