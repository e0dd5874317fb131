"""A durable workflow on its job page in headless Chromium: the timeline of its steps and
waits, send an event to it, re-run it from step N (docs/workflows.md)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from django_blamequeue import current_job, job, queue
from django_blamequeue.backends import get_backend
from django_blamequeue.jobs import registry
from django_blamequeue.models import AuditEvent
from django_blamequeue.worker import chaos

from .test_browser import browser, login, message, page, root  # noqa: F401 - the fixtures

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

QUEUE = "admin-wf"


def run_next() -> None:
    """Claim the workflow's next attempt and run it here, as a worker would."""
    engine = get_backend(None)
    [claimed] = engine.claim([QUEUE], 1, 30)
    chaos.run_claimed(engine, claimed, None, engine.now())


def reserve(n: int) -> dict[str, int]:
    return {"reserved": n}


@pytest.fixture
def order() -> Iterator[Any]:
    @job(queue=QUEUE, name="tests.admin.order", durable=True, max_attempts=3)
    def fulfil(payload: dict[str, Any]) -> Any:
        ctx = current_job()
        ctx.step("reserve", reserve, 3)
        picked = ctx.wait_for_event("carrier.picked_up", key=payload["order"], timeout=3600)
        ctx.step("ship", reserve, 1)
        return picked

    yield fulfil
    registry.unregister("tests.admin.order")


def test_see_a_workflow_wait_send_its_event_and_rerun_it_from_step_3(
    page: Page,  # noqa: F811
    order: Any,
) -> None:
    job_id = order.enqueue({"order": "o-5"}).job_id
    run_next()  # reserve, then parks on the carrier's event
    root()
    login(page, "root", f"/admin/django_blamequeue/job/{job_id}/change/")
    steps = page.locator("#bq-workflow-steps tbody tr")
    assert steps.count() == 2
    assert "reserve" in steps.nth(0).inner_text() and '{"reserved":3}' in steps.nth(0).inner_text()
    waiting = page.locator('#bq-workflow-steps tr[data-step="2"]')
    assert waiting.get_attribute("data-status") == "waiting"
    assert "waits for carrier.picked_up:o-5" in waiting.inner_text()
    assert waiting.locator(".bq-wf-bar.bq-wf-waiting").is_visible()
    # The form is filled in with what the workflow waits for: add a payload and send.
    assert page.input_value('#bq-send-event input[name="name"]') == "carrier.picked_up"
    page.fill('#bq-send-event input[name="payload"]', '{"tracking": "1Z9"}')
    page.click('#bq-send-event input[type="submit"]')
    assert "Sent event 'carrier.picked_up' with key 'o-5'." in message(page)
    run_next()
    page.goto(f"/admin/django_blamequeue/job/{job_id}/change/")
    assert page.locator("#content-main").get_attribute("data-state") == "done"
    assert page.locator('#bq-workflow-steps tr[data-status="done"]').count() == 3
    page.locator('#bq-workflow-steps tr[data-step="3"] .bq-wf-rerun').click()
    assert f"Re-running {job_id} from step 3 as job" in message(page)
    new_id = page.locator("#content-main").get_attribute("data-job-id")
    assert new_id != job_id
    assert page.locator("#bq-workflow-steps tbody tr").count() == 2  # steps 1 and 2 kept
    [rerun] = AuditEvent.objects.filter(action="system.queue.workflow.rerun")
    assert (rerun.user, rerun.job_id, rerun.data["from_step"]) == ("root", new_id, 3)
    assert queue.get_job(job_id).state == "done"  # type: ignore[union-attr]
    page.wait_for_url(re.compile(re.escape(f"/job/{new_id}/change/")))
