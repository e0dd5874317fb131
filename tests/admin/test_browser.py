"""The console in a real headless Chromium (Debian's), driven by Playwright, on a live server.

Skipped only when chromium is not installed and ``BLAMEQUEUE_TEST_REQUIRE_BROWSER`` is not
"1" (``make test`` sets it, so CI fails instead of skipping).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth.models import User

from django_blamequeue import queue
from django_blamequeue.admin.display import STATE_STYLES

from .conftest import PASSWORD, staff
from .factories import SVG_XSS, XSS, make_failed, make_jobs, settle

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = shutil.which("chromium")
REQUIRED = os.environ.get("BLAMEQUEUE_TEST_REQUIRE_BROWSER") == "1"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

if CHROMIUM is None and not REQUIRED:
    pytest.skip(
        "chromium is not installed (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")
OVERVIEW = "/admin/django_blamequeue/job/overview/"


@pytest.fixture(scope="module")
def browser(django_db_setup: None) -> Iterator[Browser]:
    assert CHROMIUM, "BLAMEQUEUE_TEST_REQUIRE_BROWSER=1 but chromium is not installed"
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread while the browser is open; the
    # ORM calls the tests (and the per-test flush) make meanwhile are synchronous all the same.
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            yield b
            b.close()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture
def page(browser: Browser, live_server: Any) -> Iterator[Page]:
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    dialogs: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pg.dialogs = dialogs  # type: ignore[attr-defined]
    yield pg
    context.close()


def login(page: Page, username: str, next_url: str = OVERVIEW) -> None:
    page.goto(f"/admin/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(re.escape(next_url.split("?")[0])))


def root() -> User:
    return User.objects.create_superuser("root", "root@example.com", PASSWORD)


def message(page: Page) -> str:
    return page.locator("ul.messagelist").inner_text()


def test_log_in_and_read_the_overview(page: Page) -> None:
    make_jobs("emails", 4)
    settle("emails", ["done"])
    make_failed("hooks", 2)
    root()
    login(page, "root")
    row = page.locator('tr[data-queue="emails"]')
    assert row.locator('td[data-state="pending"]').inner_text() == "3"
    assert row.locator('td[data-state="done"]').inner_text() == "1"
    assert page.locator('tr[data-queue="hooks"] td[data-state="failed"]').inner_text() == "2"
    assert page.locator("[data-breaker]").first.inner_text() == "closed"
    row.locator('td[data-state="pending"] a').click()
    page.wait_for_url(re.compile(r"queue=emails.*state__exact=pending"))
    page.locator("#result_list").wait_for()
    assert page.locator("#result_list tbody tr").count() == 3


def test_retry_a_dlq_job_and_see_it_pending(page: Page) -> None:
    failed = make_failed("hooks", 2)
    root()
    login(page, "root", "/admin/django_blamequeue/job/dlq/?queue=hooks")
    assert page.locator("#bq-dlq-total").inner_text() == "2"
    page.check(f'input[name="job_id"][value="{failed[0]}"]')
    page.click("#bq-retry-selected")
    assert "1 job(s) back to pending" in message(page)
    assert page.locator("#bq-dlq-total").inner_text() == "1"
    page.goto(f"/admin/django_blamequeue/job/{failed[0]}/change/")
    assert page.locator("#content-main").get_attribute("data-state") == "pending"
    assert "pending" in page.locator("#bq-state").inner_text()
    assert page.locator('#bq-trail tr[data-action="system.queue.admin.retry"]').count() == 1


def test_retry_all_states_the_count(page: Page) -> None:
    ids = make_failed("hooks", 3)
    root()
    login(page, "root", "/admin/django_blamequeue/job/dlq/?queue=hooks")
    page.click("#bq-retry-all")
    assert page.locator("#bq-confirm-count").inner_text() == "3 failed jobs"
    page.click("#bq-confirm-button")
    assert "Retried 3 job(s)" in message(page)
    assert all(queue.get_job(i).state == "pending" for i in ids)  # type: ignore[union-attr]


def test_purge_with_the_stated_count(page: Page) -> None:
    ids = make_jobs("bulk", 6)
    settle("bulk", ["done"])
    root()
    login(page, "root")
    page.locator('tr[data-queue="bulk"] a.bq-purge').click()
    assert page.locator("#bq-confirm-count").inner_text() == "5 waiting jobs"
    assert "5 pending, 0 blocked" in page.locator("#bq-confirm-question").inner_text()
    page.click("#bq-confirm-button")
    assert "Purged 5 waiting job(s) from bulk." in message(page)
    assert [queue.get_job(i) is not None for i in ids] == [True] + [False] * 5


def test_flow_graph_has_one_node_per_job_in_its_state(page: Page) -> None:
    flow = queue.enqueue_flow(
        "f",
        [
            {"name": "extract"},
            {"name": "clean", "depends_on": ["extract"]},
            {"name": "enrich", "depends_on": ["extract"], "max_attempts": 1},
            {"name": "load", "depends_on": ["clean", "enrich"]},
        ],
    )
    settle("f", ["done"])
    settle("f", ["inflight", "failed"])
    root()
    login(page, "root", f"/admin/django_blamequeue/job/flow/{flow['flow_id']}/")
    nodes = page.locator("svg.bq-graph g.bq-node")
    assert nodes.count() == 4
    expected = {j["job_id"]: queue.get_job(j["job_id"]).state for j in flow["jobs"]}  # type: ignore[union-attr]
    seen = {}
    for i in range(nodes.count()):
        node = nodes.nth(i)
        job_id, node_state = node.get_attribute("data-job-id"), node.get_attribute("data-state")
        seen[job_id] = node_state
        fill = node.locator("rect").first.get_attribute("fill")
        assert fill == STATE_STYLES[node_state].fill  # type: ignore[index]
    assert seen == expected
    assert {"done", "inflight", "failed", "blocked"} == set(seen.values())
    assert page.locator("svg.bq-graph path.bq-edge").count() == 4
    assert page.locator('#bq-legend li[data-state="failed"]').is_visible()
    page.locator(f'svg.bq-graph g[data-job-id="{flow["jobs"][2]["job_id"]}"]').click()
    page.wait_for_url(re.compile(flow["jobs"][2]["job_id"]))
    assert page.locator("#content-main").get_attribute("data-state") == "failed"


def test_staff_without_the_permissions_get_403(page: Page) -> None:
    failed = make_failed("hooks", 1)
    make_jobs("bulk", 2)
    staff("viewer", "view_job")
    login(page, "viewer")
    assert page.locator("a.bq-purge").count() == 0
    page.goto("/admin/django_blamequeue/job/dlq/?queue=hooks")
    assert page.locator("#bq-retry-selected").count() == 0
    for path in (
        "/admin/django_blamequeue/job/purge/?queue=bulk",
        "/admin/django_blamequeue/job/dlq/retry-all/?queue=hooks",
    ):
        assert page.goto(path).status == 403  # type: ignore[union-attr]
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    for path, form in (
        ("/admin/django_blamequeue/job/dlq/retry/", {"queue": "hooks", "job_id": failed[0]}),
        ("/admin/django_blamequeue/job/purge/", {"queue": "bulk", "count": "2"}),
        (f"/admin/django_blamequeue/job/{failed[0]}/cancel/", {}),
    ):
        response = page.request.post(path, form={**form, "csrfmiddlewaretoken": token})
        assert response.status == 403, path
        assert "CSRF" not in response.text()  # refused for the permission, not the token
    assert queue.get_job(failed[0]).state == "failed"  # type: ignore[union-attr]
    assert queue.size("bulk") == 2


def test_hostile_payloads_and_names_stay_inert(page: Page) -> None:
    job_id = queue.enqueue("hooks", {"note": XSS, "svg": SVG_XSS}).job_id
    flow = queue.enqueue_flow("f", [{"name": SVG_XSS}, {"name": XSS, "depends_on": [SVG_XSS]}])
    root()
    login(page, "root", f"/admin/django_blamequeue/job/{job_id}/change/")
    assert XSS in page.locator("#bq-payload").inner_text()
    page.goto(f"/admin/django_blamequeue/job/flow/{flow['flow_id']}/")
    assert page.locator("svg.bq-graph g.bq-node").count() == 2
    assert page.locator("svg.bq-graph svg").count() == 0  # no markup injected into the graph
    assert page.evaluate("window.__xss") is None
    assert page.dialogs == []  # type: ignore[attr-defined]


def test_follow_a_job_to_the_object_it_is_about_and_back(page: Page) -> None:
    from tests.procapp.models import Write

    obj = Write.objects.create(job_id="x", attempt=1, token="t")
    job_id = queue.enqueue("trail", {"n": 1}, about=obj).job_id  # the site the chain names
    root()
    login(page, "root", f"/admin/django_blamequeue/job/{job_id}/change/")
    chain = page.locator("#bq-chain").inner_text()
    assert "tests/admin/test_browser.py:" in chain and "test_follow_a_job_to_the_object" in chain
    page.click("#bq-about a")
    page.wait_for_url(re.compile(rf"/admin/procapp/write/{obj.pk}/change/"))
    row = page.locator(f'#bq-timeline tr[data-job-id="{job_id}"]')
    assert row.get_attribute("data-state") == "pending"
    row.locator("a").click()
    page.wait_for_url(re.compile(rf"/admin/django_blamequeue/job/{job_id}/change/"))
    assert page.locator("#content-main").get_attribute("data-job-id") == job_id


def test_the_job_page_shows_where_the_next_attempt_resumes(page: Page) -> None:
    from django_blamequeue.backends import get_backend

    job_id = queue.enqueue("resumable", {}).job_id
    backend = get_backend(None)
    [c] = backend.claim(["resumable"], 1, 30)
    backend.save_checkpoints([(job_id, c.token, '{"step":17,"of":30}')])
    root()
    login(page, "root", f"/admin/django_blamequeue/job/{job_id}/change/")
    shown = page.locator("#bq-checkpoint")
    assert shown.is_visible()
    assert '"step": 17' in shown.inner_text() and '"of": 30' in shown.inner_text()
