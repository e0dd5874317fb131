"""The console's charts, search, bulk actions, attempt history and read-only view in a real
headless Chromium (fixtures of test_browser.py)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from django_blamequeue import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.core.timeseries import Sample
from django_blamequeue.models import AuditEvent

from .conftest import staff
from .factories import make_failed, make_jobs, settle
from .test_browser import browser, login, message, page, root  # noqa: F401

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")
JOB = "/admin/django_blamequeue/job/"


def test_charts_draw_the_counts_a_worker_recorded_and_refresh_live(page: Page) -> None:  # noqa: F811
    backend = get_backend()
    backend.record_samples([Sample(queue="emails", name="app.send", done=30, failed=2)])
    root()
    login(page, "root", f"{JOB}charts/?queue=emails")
    chart = page.locator('figure.bq-chart[data-chart="throughput"] svg.bq-chart-svg')
    chart.wait_for()
    assert page.locator("figure.bq-chart").count() == 4  # throughput, wait, run, depth
    tips = " ".join(chart.locator("g.bq-chart-bar title").all_text_contents())
    assert "done: 30" in tips and "failed: 2" in tips, tips
    # Live: the region is fetched again and swapped without a reload.
    backend.record_samples([Sample(queue="emails", name="app.send", done=5)])
    page.evaluate("document.querySelector('[data-live]').setAttribute('data-mark', 'old')")
    page.wait_for_function(
        "document.querySelector('[data-live]').getAttribute('data-refreshed') !== null",
        timeout=20_000,
    )
    assert page.locator("[data-live]").get_attribute("data-mark") is None


def test_search_by_argument_then_retry_all_matches_in_one_action(page: Page) -> None:  # noqa: F811
    payloads = [{"customer_id": 1234 if i % 2 else 7, "n": i} for i in range(6)]
    ids = make_jobs("orders", 6, payloads=payloads, max_attempts=1)
    settle("orders", ["failed"] * 6, error="TimeoutError: the payment service")
    root()
    login(page, "root", JOB)
    page.locator('input[name="arg"]').fill("customer_id=1234")
    page.locator('input[name="arg"]').press("Enter")
    page.wait_for_url(re.compile(r"arg=customer_id%3D1234"))
    assert page.locator("#result_list tbody tr").count() == 3
    page.select_option("#bq-bulk-verb", "retry")
    page.click("#bq-bulk-review")
    assert page.locator("#bq-bulk-count").inner_text() == "3 jobs"
    assert "customer_id=1234" in page.locator("#bq-bulk-filter").inner_text()
    page.click("#bq-bulk-button")
    assert "3 job(s) retried." in message(page)
    states = {i: queue.get_job(i).state for i in ids}  # type: ignore[union-attr]
    assert sorted(states.values()) == ["failed"] * 3 + ["pending"] * 3
    event = AuditEvent.objects.get(action="system.queue.admin.bulk")
    assert event.user == "root"
    assert event.data["filter"] == {"arg": "customer_id=1234"}


def test_the_job_page_shows_every_attempt_across_a_dlq_retry(page: Page) -> None:  # noqa: F811
    [job_id] = make_failed("hooks", 1, error="TimeoutError: first try")
    queue.dlq_retry(job_id)
    settle("hooks", ["failed"], error="ValueError: second try")
    root()
    login(page, "root", f"{JOB}{job_id}/change/")
    rows = page.locator("#bq-attempts tr[data-outcome]")
    assert rows.count() == 2
    assert "TimeoutError: first try" in rows.nth(0).inner_text()
    page.click('a[href="#bq-round-2"]')
    assert page.url.endswith("#bq-round-2")
    rows.nth(1).locator("summary").click()
    assert rows.nth(1).locator("pre.bq-trace").is_visible()


def test_a_read_only_operator_sees_no_action_and_cannot_post_one(page: Page) -> None:  # noqa: F811
    [failed] = make_failed("hooks", 1)
    staff("viewer", "view_job", "view_auditevent")
    login(page, "viewer", f"{JOB}{failed}/change/")
    assert page.locator("#bq-retry, #bq-cancel").count() == 0
    page.goto(JOB)
    assert page.locator("#bq-bulk-all, select[name=action]").count() == 0
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    response = page.request.post(
        f"{JOB}bulk/",
        form={
            "verb": "retry",
            "filters": "queue=hooks",
            "bound": "2999-01-01T00:00:00+00:00",
            "count": "1",
            "csrfmiddlewaretoken": token,
        },
        headers={"Referer": page.url},
    )
    assert response.status == 403
    assert queue.get_job(failed).state == "failed"  # type: ignore[union-attr]
