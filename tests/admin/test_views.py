"""Every console view through Django's test client: content, permissions, CSRF, escaping."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext

from django_blamequeue import queue
from django_blamequeue.admin import base as admin_base
from django_blamequeue.admin import operations
from django_blamequeue.backends import get_backend
from django_blamequeue.models import AuditEvent

from .conftest import staff
from .factories import SVG_XSS, XSS, make_failed, make_jobs, settle

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

JOB = "/admin/django_blamequeue/job/"
OVERVIEW = f"{JOB}overview/"
DLQ = f"{JOB}dlq/"
RETRY = f"{JOB}dlq/retry/"
RETRY_ALL = f"{JOB}dlq/retry-all/"
PURGE = f"{JOB}purge/"
AUDIT = "/admin/django_blamequeue/auditevent/"
Login = Callable[[User], Client]


def text(response: Any) -> str:
    return response.content.decode()


def state(job_id: str) -> str:
    info = queue.get_job(job_id)
    assert info is not None
    return info.state


def admin_events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


# -- overview ------------------------------------------------------------------------------
def test_overview_has_a_row_per_queue_with_counts_ages_last_hour_and_breaker(
    admin_client_: Client,
) -> None:
    make_jobs("emails", 5)
    settle("emails", ["done", "done", "inflight"])
    make_failed("hooks", 2)
    body = text(admin_client_.get(OVERVIEW))
    emails = re.search(r'<tr data-backend="default" data-queue="emails">(.*?)</tr>', body, re.S)
    assert emails is not None
    row = emails.group(1)
    assert re.search(
        r'data-state="pending"><a href="[^"]*queue=emails[^"]*state__exact=pending'
        r'[^"]*">2</a>',
        row,
    )
    assert re.search(r'data-state="done"><a [^>]*>2</a>', row)
    assert re.search(r'data-state="inflight"><a [^>]*>1</a>', row)
    assert "closed" in row
    hooks = re.search(r'data-queue="hooks">(.*?)</tr>', body, re.S)
    assert hooks is not None
    assert "DLQ (2)" in hooks.group(1)
    assert 'bq-error-line">2</strong>' in hooks.group(1)  # failed in the last hour
    assert "Purge" in row and "Purge" not in hooks.group(1)  # hooks has nothing waiting


def test_overview_shows_an_open_breaker(admin_client_: Client) -> None:
    make_jobs("emails", 1)
    breaker = get_backend().resilience.breaker  # type: ignore[union-attr]
    for _ in range(breaker.threshold):
        breaker.failure()
    body = text(admin_client_.get(OVERVIEW))
    assert 'data-breaker="open"' in body


def test_console_screens_need_staff_and_the_view_permission(client_as: Login) -> None:
    make_failed("hooks", 1)
    anonymous = Client()
    assert anonymous.get(OVERVIEW).status_code == 302  # to the login page
    nobody = client_as(staff("nobody"))
    for url in (OVERVIEW, DLQ, f"{DLQ}?queue=hooks", JOB):
        assert nobody.get(url).status_code == 403, url


# -- job list ------------------------------------------------------------------------------
def listed(client: Client, query: str = "") -> list[str]:
    body = text(client.get(f"{JOB}?{query}"))
    return re.findall(r'name="_selected_action" value="([0-9A-Z]{26})"', body)


def test_job_list_filters_by_queue_state_name_and_classification(admin_client_: Client) -> None:
    a = make_jobs("alpha", 3, classification="bulk")
    b = make_jobs("beta", 2, name=None)
    settle("alpha", ["done"])
    assert sorted(listed(admin_client_, "queue=beta")) == sorted(b)
    assert listed(admin_client_, "queue=alpha&state__exact=done") == [a[0]]
    assert sorted(listed(admin_client_, "state__exact=pending")) == sorted(a[1:] + b)
    assert sorted(listed(admin_client_, "name=beta")) == sorted(b)
    assert sorted(listed(admin_client_, "classification=bulk")) == sorted(a)
    body = text(admin_client_.get(JOB))
    for choice in ("?queue=alpha", "?queue=beta", "?name=alpha", "?classification=bulk"):
        assert choice in html.unescape(body), choice


def test_job_list_searches_exact_id_dedupe_key_and_trace_id(admin_client_: Client) -> None:
    keyed = queue.enqueue("s", {"n": 1}, dedupe_key="order-42").job_id
    traced = queue.enqueue("s", {"n": 2}, trace_id="trace-abc").job_id
    other = queue.enqueue("s", {"n": 3}).job_id
    assert listed(admin_client_, "q=order-42") == [keyed]
    assert listed(admin_client_, "q=trace-abc") == [traced]
    assert listed(admin_client_, f"q={other}") == [other]
    assert listed(admin_client_, "q=order") == []  # exact, not a substring


def test_job_list_draws_progress_attempts_and_relative_times(admin_client_: Client) -> None:
    job_id = make_jobs("p", 1)[0]
    claimed = get_backend().claim(["p"], 1, 30)[0]
    get_backend().set_progress(job_id, claimed.token, 40)
    body = text(admin_client_.get(f"{JOB}?queue=p"))
    assert '<progress class="bq-progress" max="100" value="40"' in body
    assert "1/3" in body
    assert re.search(r"started <time [^>]*>(now|\d+ s ago)</time>", body)


def test_job_list_never_counts_the_whole_table(admin_client_: Client) -> None:
    make_jobs("c", 12)
    with CaptureQueriesContext(connections["default"]) as queries:
        assert admin_client_.get(f"{JOB}?queue=c").status_code == 200
    sql = [
        q["sql"].upper() for q in queries.captured_queries if "BLAMEQUEUE_JOB" in q["sql"].upper()
    ]
    counts = [s for s in sql if "COUNT(" in s]
    assert counts and all("LIMIT" in s for s in counts), counts
    assert not any("DISTINCT" in s for s in sql), sql


def test_job_list_says_plus_past_the_count_cap(
    admin_client_: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_base.CappedPaginator, "cap", 5)
    make_jobs("c", 8)
    body = text(admin_client_.get(JOB))
    assert "5+ jobs" in body and "narrow the list" in body
    make_jobs("d", 2)
    assert "2 jobs" in text(admin_client_.get(f"{JOB}?queue=d"))


def test_job_list_cancel_action_needs_its_permission(client_as: Login) -> None:
    ids = make_jobs("x", 2)
    form = {"action": "cancel_selected", "_selected_action": ids, "index": 0}
    viewer = client_as(staff("viewer", "view_job"))
    assert viewer.post(JOB, form).status_code == 403
    assert all(state(i) == "pending" for i in ids)
    canceller = client_as(staff("canceller", "view_job", "cancel_job"))
    assert canceller.post(JOB, form).status_code == 302
    assert all(state(i) == "cancelled" for i in ids)
    assert [e.user for e in admin_events(operations.ADMIN_CANCEL)] == ["canceller"] * 2


def test_job_list_retry_action_needs_its_permission(client_as: Login) -> None:
    ids = make_failed("x", 2)
    form = {"action": "retry_selected", "_selected_action": ids, "index": 0}
    assert client_as(staff("viewer", "view_job")).post(JOB, form).status_code == 403
    assert all(state(i) == "failed" for i in ids)
    retrier = client_as(staff("retrier", "view_job", "retry_job"))
    assert retrier.post(JOB, form).status_code == 302
    assert all(state(i) == "pending" for i in ids)


def test_job_list_reads_the_selected_local_backend(admin_client_: Client) -> None:
    from tests.conftest import need_server

    need_server("postgres")
    on_pg = make_jobs("pgq", 2, backend="postgres")
    make_jobs("sq", 1)
    assert sorted(listed(admin_client_, "backend=postgres")) == sorted(on_pg)
    body = text(admin_client_.get(f"{JOB}{on_pg[0]}/change/?backend=postgres"))
    assert "pgq on backend postgres" in body


# -- job page ------------------------------------------------------------------------------
def test_job_page_shows_escaped_pretty_json_error_traceback_trail_and_flow(
    admin_client_: Client,
) -> None:
    flow = queue.enqueue_flow(
        "f", [{"name": "a", "payload": {"html": XSS, "svg": SVG_XSS}, "max_attempts": 1}]
    )
    job_id = flow["jobs"][0]["job_id"]
    settle("f", ["failed"], error="ValueError: <img src=x onerror=alert(1)>")
    body = text(admin_client_.get(f"{JOB}{job_id}/change/"))
    assert "<script>" not in body.replace('<script src="', "")  # only the admin's own scripts
    assert "<svg onload" not in body and "<img src=x" not in body
    assert html.escape(XSS, quote=False).replace("'", "&#x27;") in body
    assert "&quot;html&quot;: " in body  # indented JSON, quotes escaped
    assert "Traceback (most recent call last)" in body
    assert "ValueError: &lt;img src=x onerror=alert(1)&gt;" in body
    assert 'data-action="system.queue.dlq.write"' in body
    assert f'href="{JOB}flow/{flow["flow_id"]}/' in body
    assert 'id="bq-retry"' in body


def test_job_page_shows_the_checkpoint_the_next_attempt_resumes_from(
    admin_client_: Client,
) -> None:
    job_id = queue.enqueue("resumable", {}).job_id
    assert 'id="bq-checkpoint"' not in text(admin_client_.get(f"{JOB}{job_id}/change/"))
    backend = get_backend(None)
    [c] = backend.claim(["resumable"], 1, 30)
    backend.save_checkpoints([(job_id, c.token, '{"page":12,"note":"<b>x</b>"}')])
    body = text(admin_client_.get(f"{JOB}{job_id}/change/"))
    shown = re.search(r'<pre class="bq-json" id="bq-checkpoint">(.*?)</pre>', body, re.S)
    assert shown is not None
    assert "&quot;page&quot;: 12" in shown.group(1)
    assert "&lt;b&gt;x&lt;/b&gt;" in shown.group(1) and "<b>" not in shown.group(1)


def test_job_page_shows_the_unique_key_and_what_the_calls_it_absorbed_did(
    admin_client_: Client, settings: Any
) -> None:
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "AUDIT": "all"}  # the outcomes are rows
    spec = {"key": "sync-7", "on_conflict": "replace"}
    holder = queue.enqueue("uq", {"v": 1}, unique=spec).job_id
    for v in (2, 3):
        queue.enqueue("uq", {"v": v}, unique=spec)
    queue.enqueue("uq", {"v": 4}, unique={"key": "sync-7"})  # skip
    body = text(admin_client_.get(f"{JOB}{holder}/change/"))
    shown = re.search(r'<dd id="bq-unique">(.*?)</dd>', body, re.S)
    assert shown is not None
    assert shown.group(1) == "sync-7 — absorbed 3 calls (2 replace, 1 skip)"
    assert listed(admin_client_, "q=sync-7") == [holder]  # search by the held key


def test_job_page_of_an_unknown_job_is_404(admin_client_: Client) -> None:
    assert admin_client_.get(f"{JOB}01NOSUCHJOB0000000000000000/change/").status_code == 404


def test_cancel_from_the_job_page_is_post_only_permissioned_and_audited(client_as: Login) -> None:
    job_id = make_jobs("x", 1)[0]
    url = f"{JOB}{job_id}/cancel/"
    viewer = client_as(staff("viewer", "view_job"))
    assert 'id="bq-cancel"' not in text(viewer.get(f"{JOB}{job_id}/change/"))
    assert viewer.post(url).status_code == 403
    canceller = client_as(staff("canceller", "view_job", "cancel_job"))
    assert canceller.get(url).status_code == 405
    assert 'id="bq-cancel"' in text(canceller.get(f"{JOB}{job_id}/change/"))
    response = canceller.post(url, follow=True)
    assert "cancelled" in text(response)
    assert state(job_id) == "cancelled"
    (event,) = admin_events(operations.ADMIN_CANCEL)
    assert (event.user, event.job_id, event.queue, event.data) == (
        "canceller",
        job_id,
        "x",
        {"ok": True},
    )


# -- DLQ -----------------------------------------------------------------------------------
def test_dlq_index_lists_queues_with_failed_jobs(admin_client_: Client) -> None:
    make_failed("hooks", 3)
    make_jobs("calm", 1)
    body = text(admin_client_.get(DLQ))
    assert "?backend=default&amp;queue=hooks" in body and ">3</td>" in body
    assert "calm" not in body


def test_dlq_lists_failed_jobs_with_error_and_traceback(admin_client_: Client) -> None:
    ids = make_failed("hooks", 3, error="ConnectionError: refused <b>")
    body = text(admin_client_.get(f"{DLQ}?queue=hooks"))
    assert 'id="bq-dlq-total">3<' in body
    assert all(f'data-job-id="{i}"' in body for i in ids)
    assert "ConnectionError: refused &lt;b&gt;" in body and "<summary>traceback</summary>" in body
    assert "Retry all 3" in body


def test_dlq_retry_selected_puts_jobs_back_and_audits_the_user(client_as: Login) -> None:
    ids = make_failed("hooks", 3)
    retrier = client_as(staff("retrier", "view_job", "retry_job"))
    response = retrier.post(
        RETRY, {"backend": "default", "queue": "hooks", "job_id": ids[:2]}, follow=True
    )
    assert "2 job(s) back to pending" in text(response)
    assert [state(i) for i in ids] == ["pending", "pending", "failed"]
    events = admin_events(operations.ADMIN_RETRY)
    assert [(e.user, e.job_id, e.queue) for e in events] == [
        ("retrier", i, "hooks") for i in ids[:2]
    ]


def test_dlq_retry_needs_its_permission_and_post(client_as: Login) -> None:
    ids = make_failed("hooks", 1)
    viewer = client_as(staff("viewer", "view_job"))
    body = text(viewer.get(f"{DLQ}?queue=hooks"))
    assert "Retry selected" not in body and "Retry all" not in body
    assert viewer.post(RETRY, {"queue": "hooks", "job_id": ids}).status_code == 403
    assert viewer.get(f"{RETRY_ALL}?queue=hooks").status_code == 403
    assert viewer.post(RETRY_ALL, {"queue": "hooks", "count": 1}).status_code == 403
    assert state(ids[0]) == "failed"
    retrier = client_as(staff("retrier", "view_job", "retry_job"))
    assert retrier.get(RETRY).status_code == 405


def test_retry_all_confirms_with_the_count_then_retries_and_audits(client_as: Login) -> None:
    ids = make_failed("hooks", 4)
    make_failed("other", 1)
    retrier = client_as(staff("retrier", "view_job", "retry_job"))
    body = text(retrier.get(f"{RETRY_ALL}?queue=hooks"))
    assert 'id="bq-confirm-count">4 failed jobs<' in body
    assert 'name="count" value="4"' in body and "csrfmiddlewaretoken" in body
    assert all(state(i) == "failed" for i in ids)  # the GET changed nothing
    response = retrier.post(
        RETRY_ALL, {"backend": "default", "queue": "hooks", "count": 4}, follow=True
    )
    assert "Retried 4 job(s) from the DLQ of hooks." in text(response)
    assert all(state(i) == "pending" for i in ids)
    (event,) = admin_events(operations.ADMIN_RETRY_ALL)
    assert (event.user, event.queue, event.data) == (
        "retrier",
        "hooks",
        {"count": 4, "confirmed_count": 4},
    )


def test_dlq_pages_through_a_long_dlq(
    admin_client_: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_blamequeue.admin import overview

    monkeypatch.setattr(overview, "DLQ_PER_PAGE", 2)
    ids = make_failed("hooks", 5)
    first = text(admin_client_.get(f"{DLQ}?queue=hooks"))
    last = text(admin_client_.get(f"{DLQ}?queue=hooks&page=3"))
    assert "page 1 of 3" in first and "next page" in first
    assert f'data-job-id="{ids[4]}"' in last and f'data-job-id="{ids[0]}"' not in last


# -- purge ---------------------------------------------------------------------------------
def confirmed(body: str, **fields: Any) -> dict[str, Any]:
    """The purge form as the confirmation page filled it in (its time bound), plus ``fields``."""
    match = re.search(r'name="before" value="([^"]+)"', body)
    assert match, "the confirmation carries no time bound"
    return {"before": html.unescape(match.group(1)), **fields}


def test_purge_confirms_with_the_count_and_deletes_only_waiting_jobs(client_as: Login) -> None:
    waiting = make_jobs("q", 5)
    settle("q", ["done", "inflight"])
    purger = client_as(staff("purger", "view_job", "purge_queue"))
    body = text(purger.get(f"{PURGE}?queue=q"))
    assert 'id="bq-confirm-count">3 waiting jobs<' in body
    assert "3 pending, 0 blocked" in body
    assert len([i for i in waiting if queue.get_job(i)]) == 5  # the GET changed nothing
    form = confirmed(body, backend="default", queue="q", count=3)
    response = purger.post(PURGE, form, follow=True)
    assert "Purged 3 waiting job(s) from q." in text(response)
    assert [queue.get_job(i) is not None for i in waiting] == [True, True, False, False, False]
    (event,) = admin_events(operations.ADMIN_PURGE)
    assert (event.user, event.queue, event.data) == (
        "purger",
        "q",
        {"count": 3, "confirmed_count": 3},
    )


def test_purge_deletes_what_it_confirmed_and_keeps_jobs_enqueued_since(
    client_as: Login,
) -> None:
    shown = make_jobs("q", 8)
    purger = client_as(staff("purger", "view_job", "purge_queue"))
    body = text(purger.get(f"{PURGE}?queue=q"))
    newer = make_jobs("q", 7)
    response = purger.post(PURGE, confirmed(body, queue="q", count=8), follow=True)
    assert (
        "Purged 8 waiting job(s) from q; 7 newer job(s) arrived after the confirmation and "
        "were kept." in text(response)
    )
    assert not any(queue.get_job(i) for i in shown)
    assert all(queue.get_job(i) for i in newer)


def test_a_purge_without_the_confirmations_bound_deletes_nothing(client_as: Login) -> None:
    ids = make_jobs("q", 2)
    purger = client_as(staff("purger", "view_job", "purge_queue"))
    for before in ["", "yesterday", "2026-01-01T00:00:00"]:  # none, no time, no time zone
        response = purger.post(PURGE, {"queue": "q", "count": 2, "before": before})
        assert response.status_code == 400, before
    assert all(queue.get_job(i) for i in ids)


def test_purge_needs_its_permission(client_as: Login) -> None:
    ids = make_jobs("q", 2)
    for user in (staff("viewer", "view_job"), staff("retrier", "view_job", "retry_job")):
        c = client_as(user)
        assert c.get(f"{PURGE}?queue=q").status_code == 403
        assert c.post(PURGE, {"queue": "q", "count": 2}).status_code == 403
    assert all(queue.get_job(i) for i in ids)
    assert 'class="bq-purge"' not in text(client_as(staff("v2", "view_job")).get(OVERVIEW))


def test_purge_and_its_audit_row_commit_together(
    client_as: Login, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = make_jobs("q", 2)
    purger = client_as(staff("purger", "view_job", "purge_queue"))
    body = text(purger.get(f"{PURGE}?queue=q"))

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("audit table unavailable")

    monkeypatch.setattr(operations, "_write", broken)
    with pytest.raises(RuntimeError):
        purger.post(PURGE, confirmed(body, queue="q", count=2))
    assert all(queue.get_job(i) for i in ids)  # rolled back with the failed audit row
    assert not AuditEvent.objects.filter(action="system.queue.purge").exists()


def test_retry_and_its_audit_row_commit_together(
    client_as: Login, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = make_failed("hooks", 1)
    retrier = client_as(staff("retrier", "view_job", "retry_job"))
    monkeypatch.setattr(operations, "_write", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        retrier.post(RETRY, {"queue": "hooks", "job_id": ids})
    assert state(ids[0]) == "failed"


# -- CSRF, methods, bad input --------------------------------------------------------------
@pytest.mark.parametrize("url", [RETRY, RETRY_ALL, PURGE, "cancel", JOB])
def test_every_post_needs_a_csrf_token(url: str, root: User) -> None:
    job_id = make_failed("q", 1)[0]
    if url == "cancel":
        url = f"{JOB}{job_id}/cancel/"
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(root)
    data = {
        "queue": "q",
        "count": 1,
        "job_id": [job_id],
        "action": "retry_selected",
        "_selected_action": [job_id],
        "index": 0,
    }
    assert strict.post(url, data).status_code == 403
    assert state(job_id) == "failed"


def test_bad_queue_names_and_backends_are_refused(admin_client_: Client) -> None:
    assert admin_client_.get(f"{PURGE}?queue=").status_code == 400
    assert admin_client_.get(f"{PURGE}?queue=q&backend=nope").status_code == 404
    assert admin_client_.get(f"{DLQ}?queue={'x' * 300}").status_code == 400


# -- flows ---------------------------------------------------------------------------------
def graph_svg(body: str) -> str:
    start = body.index('<svg xmlns="http://www.w3.org/2000/svg" class="bq-graph"')
    return body[start : body.index("</svg>", start)]


def test_flow_page_draws_one_node_per_job_coloured_by_state(admin_client_: Client) -> None:
    flow = queue.enqueue_flow(
        "f",
        [
            {"name": "a"},
            {"name": "b", "depends_on": ["a"]},
            {"name": "c", "depends_on": ["a"]},
            {"name": "d", "depends_on": ["b", "c"]},
        ],
    )
    settle("f", ["done"])
    settle("f", ["failed", "inflight"])
    body = text(admin_client_.get(f"{JOB}flow/{flow['flow_id']}/"))
    svg = graph_svg(body)
    nodes = dict(re.findall(r'data-job-id="([0-9A-Z]{26})" data-state="(\w+)"', svg))
    ids = {j["name"]: j["job_id"] for j in flow["jobs"]}
    assert nodes == {
        ids["a"]: "done",
        ids["b"]: "failed",
        ids["c"]: "inflight",
        ids["d"]: "blocked",
    }
    assert svg.count('class="bq-edge bq-edge-dep"') == 4
    assert all(f'href="{JOB}{i}/change/?backend=default"' in svg for i in ids.values())
    assert 'id="bq-legend"' in body and "http://" not in svg.replace(
        "http://www.w3.org/2000/svg", ""
    )


def test_flow_page_escapes_names_in_the_svg(admin_client_: Client) -> None:
    flow = queue.enqueue_flow("f", [{"name": SVG_XSS}, {"name": XSS, "depends_on": [SVG_XSS]}])
    body = text(admin_client_.get(f"{JOB}flow/{flow['flow_id']}/"))
    assert "<svg onload" not in body and 'href="javascript:' not in body
    assert all(
        h.startswith(("/", "#", "?")) for h in re.findall(r'href="([^"]*)"', graph_svg(body))
    )
    assert "<script>window" not in body
    assert "&lt;script&gt;" in body and "&quot;&gt;&lt;svg" in body


def test_flow_with_10000_children_is_grouped_and_paged(admin_client_: Client) -> None:
    spec: list[dict[str, Any]] = [{"name": "root"}]
    spec += [{"name": f"c{i}", "job": None, "depends_on": ["root"]} for i in range(10_000)]
    flow = queue.enqueue_flow("big", [{k: v for k, v in c.items() if v is not None} for c in spec])
    settle("big", ["done"])
    settle("big", ["done"] * 30 + ["failed"] * 5)
    url = f"{JOB}flow/{flow['flow_id']}/"
    body = text(admin_client_.get(url))
    svg = graph_svg(body)
    assert svg.count('class="bq-node"') == 2  # the root and one group of 10,000
    assert 'data-group="group:0"' in svg and "×10,000" in svg
    page = text(admin_client_.get(f"{url}?group=0&state=failed"))
    grid = page[page.index('class="bq-grid"') :]
    assert grid.count('class="bq-cell"') == 5 and 'data-state="failed"' in grid
    first = text(admin_client_.get(f"{url}?group=0"))
    assert first.count('class="bq-cell"') == 400 and "page 1 of 25" in first


def test_unknown_flow_is_404(admin_client_: Client) -> None:
    assert admin_client_.get(f"{JOB}flow/NOSUCHFLOW/").status_code == 404


# -- audit log -----------------------------------------------------------------------------
def test_audit_log_is_read_only_and_filters_by_action_queue_job_and_user(
    client_as: Login,
) -> None:
    ids = make_failed("hooks", 2)
    make_failed("other", 1)
    retrier = client_as(staff("retrier", "view_job", "retry_job", "view_auditevent"))
    retrier.post(RETRY, {"queue": "hooks", "job_id": ids[:1]})

    def rows(query: str) -> list[str]:
        body = text(retrier.get(f"{AUDIT}?{query}"))
        return re.findall(r'<td class="field-action_name">([^<]+)</td>', body)

    assert rows(f"action={operations.ADMIN_RETRY}") == ["admin.retry"]
    assert set(rows("queue=other")) == {"consume.failure", "dlq.write"}
    assert rows(f"job_id={ids[0]}") == ["admin.retry", "dlq.retry", "dlq.write", "consume.failure"]
    assert rows("user=retrier") == ["admin.retry"]
    assert rows("user=nobody") == []
    body = text(retrier.get(AUDIT))
    assert (
        "Add audit event" not in body and 'name="action"' not in body.split("changelist-filter")[0]
    )
    event = AuditEvent.objects.filter(action=operations.ADMIN_RETRY).get()
    detail = retrier.get(f"{AUDIT}{event.pk}/change/")
    assert (
        detail.status_code == 200 and 'type="submit"' not in text(detail).split("content-main")[1]
    )
    assert retrier.post(f"{AUDIT}{event.pk}/delete/").status_code == 403


def test_audit_log_needs_its_view_permission(client_as: Login) -> None:
    assert client_as(staff("jobs-only", "view_job")).get(AUDIT).status_code == 403


# -- schedules -----------------------------------------------------------------------------
SCHEDULES = "/admin/django_blamequeue/schedule/"


def schedule_form(**changes: Any) -> dict[str, Any]:
    form = {
        "name": "nightly",
        "job": "demo.jobs.send_email",
        "queue": "",
        "payload": '{"to": "x"}',
        "cron": "30 2 * * *",
        "interval": "",
        "timezone": "Europe/Paris",
        "enabled": "on",
        "backend": "",
    }
    form.update(changes)
    return {k: v for k, v in form.items() if v is not None}


def test_schedules_are_created_with_validation_next_fires_and_an_audit_row(
    client_as: Login,
) -> None:
    from django_blamequeue.models import Schedule

    editor = client_as(staff("editor", "view_schedule", "add_schedule", "change_schedule"))
    bad = text(editor.post(f"{SCHEDULES}add/", schedule_form(cron="61 * * * *")))
    assert "minute field" in bad and not Schedule.objects.exists()
    both = text(editor.post(f"{SCHEDULES}add/", schedule_form(interval="60")))
    assert "exactly one of cron and interval" in both
    zone = text(editor.post(f"{SCHEDULES}add/", schedule_form(timezone="Mars/Olympus")))
    assert "not an IANA time zone" in zone
    unknown = text(editor.post(f"{SCHEDULES}add/", schedule_form(job="no.such.job")))
    assert "no job is registered" in unknown
    assert editor.post(f"{SCHEDULES}add/", schedule_form()).status_code == 302
    s = Schedule.objects.get()
    assert (s.cron, s.timezone, s.source, s.enabled) == (
        "30 2 * * *",
        "Europe/Paris",
        "admin",
        True,
    )
    assert s.last_fired_at is not None
    page = text(editor.get(f"{SCHEDULES}{s.pk}/change/"))
    assert page.count("CET in Europe/Paris") + page.count("CEST in Europe/Paris") == 5
    assert "02:30" in page
    listing = text(editor.get(SCHEDULES))
    assert "cron 30 2 * * *" in listing and re.search(r"in \d+(\.\d)? (h|min|s)", listing)
    editor.post(f"{SCHEDULES}{s.pk}/change/", schedule_form(cron="", interval="90", enabled=None))
    s.refresh_from_db()
    assert (s.interval, s.cron, s.enabled) == (90.0, "", False)
    events = admin_events(audit_action("schedule.add")) + admin_events(
        audit_action("schedule.change")
    )
    assert [(e.user, e.data["schedule"]) for e in events] == [("editor", "nightly")] * 2
    assert set(events[1].data["changed"]) >= {"cron", "interval", "enabled"}


def audit_action(verb: str) -> str:
    from django_blamequeue import audit

    return audit.ADMIN_PREFIX + verb


def test_schedule_edits_need_their_permissions(client_as: Login) -> None:
    from django_blamequeue.models import Schedule

    s = Schedule.objects.create(name="s", job="demo.jobs.send_email", interval=60)
    reader = client_as(staff("reader", "view_schedule"))
    assert reader.get(SCHEDULES).status_code == 200
    assert reader.post(f"{SCHEDULES}add/", schedule_form()).status_code == 403
    assert reader.post(f"{SCHEDULES}{s.pk}/change/", schedule_form(name="s")).status_code == 403
    assert reader.post(f"{SCHEDULES}{s.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Schedule.objects.get().name == "s"
    deleter = client_as(staff("deleter", "view_schedule", "delete_schedule"))
    assert deleter.post(f"{SCHEDULES}{s.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not Schedule.objects.exists()
    (event,) = admin_events(audit_action("schedule.delete"))
    assert event.user == "deleter"


def test_schedules_from_settings_are_read_only(admin_client_: Client) -> None:
    from django_blamequeue.models import Schedule

    s = Schedule.objects.create(
        name="from-settings", job="demo.jobs.send_email", interval=60, source="settings"
    )
    assert (
        admin_client_.post(
            f"{SCHEDULES}{s.pk}/change/", schedule_form(name="from-settings")
        ).status_code
        == 403
    )
    assert admin_client_.post(f"{SCHEDULES}{s.pk}/delete/", {"post": "yes"}).status_code == 403


def test_a_schedule_whose_time_zone_vanished_shows_so_and_the_pages_still_render(
    client_as: Login,
) -> None:
    """A row saved on a host whose tz database had the zone, read on one that lacks it."""
    from django_blamequeue.models import Schedule

    gone = Schedule.objects.create(
        name="gone",
        job="demo.jobs.send_email",
        cron="0 3 * * *",
        timezone="Mars/Olympus",
    )
    ticking = Schedule.objects.create(
        name="ticking", job="demo.jobs.send_email", interval=60, timezone="Atlantis/Lost"
    )
    Schedule.objects.create(name="fine", job="demo.jobs.send_email", interval=60)
    reader = client_as(staff("reader", "view_schedule"))
    listing = reader.get(SCHEDULES)
    assert listing.status_code == 200
    body = text(listing)
    assert "unknown time zone &#x27;Mars/Olympus&#x27;" in body
    assert "unknown time zone &#x27;Atlantis/Lost&#x27;" in body
    assert "fine" in body
    for s in (gone, ticking):
        page = reader.get(f"{SCHEDULES}{s.pk}/change/")
        assert page.status_code == 200
        assert "is not a time zone this host knows" in text(page)
    # an editor gives it a zone that exists, validated as ever
    editor = client_as(staff("editor", "view_schedule", "change_schedule"))
    fixed = editor.post(
        f"{SCHEDULES}{gone.pk}/change/", schedule_form(name="gone", timezone="Europe/Paris")
    )
    assert fixed.status_code == 302
    gone.refresh_from_db()
    assert gone.timezone == "Europe/Paris"


# -- what the job list lets a viewer query ---------------------------------------------------
@pytest.mark.parametrize(
    "query",
    [
        "lease_token__startswith=a",
        "error__contains=secret",
        "id__in=a,b",
        "queue__regex=%5C",  # a backslash: an invalid pattern
        "payload__contains=x",
        "attempts__gt=0",
    ],
)
def test_the_job_list_refuses_any_lookup_but_its_own_filters(client_as: Login, query: str) -> None:
    make_failed("emails", 1, error="a secret")
    viewer = client_as(staff("viewer", "view_job"))
    assert viewer.get(f"{JOB}?{query}").status_code == 400


def test_the_job_list_takes_its_documented_filters(client_as: Login) -> None:
    [failed] = make_failed("emails", 1)
    [waiting] = make_jobs("reports", 1)
    flow = queue.enqueue_flow("flows", [{"name": "a", "payload": {}}])
    [member] = [j["job_id"] for j in flow["jobs"]]
    viewer = client_as(staff("viewer", "view_job"))
    for query, shown, hidden in [
        ("state__exact=failed", failed, waiting),
        ("queue=reports&backend=default", waiting, failed),
        (f"flow_id={flow['flow_id']}", member, waiting),
        (f"trace_id={flow['flow_id']}", member, waiting),  # a flow's jobs carry its id
    ]:
        response = viewer.get(f"{JOB}?{query}")
        assert response.status_code == 200, query
        body = text(response)
        assert shown in body and hidden not in body, query


def test_a_job_retried_from_the_dlq_reads_pending_with_its_last_attempts_reason(
    admin_client_: Client,
) -> None:
    [job_id] = make_failed("hooks", 1)
    assert queue.dlq_retry(job_id)
    body = text(admin_client_.get(f"{JOB}{job_id}/change/"))
    shown = re.search(r'<dd id="bq-state">(.*?)</dd>', body, re.S)
    assert shown is not None and shown.group(1).endswith(" — last attempt: error")
    assert "pending" in shown.group(1)


def test_the_admin_index_leaves_the_bookkeeping_tables_out_but_keeps_their_pages(
    admin_client_: Client,
) -> None:
    body = text(admin_client_.get("/admin/"))
    assert "Jobs" in body and "Schedules" in body
    assert "Flow dependencies" not in body and "Outbox entries" not in body
    for model in ("flowdependency", "outboxentry"):
        assert admin_client_.get(f"/admin/django_blamequeue/{model}/").status_code == 200


def test_schedules_show_overlap_and_skips_refuse_a_call_that_cannot_bind_and_keep_code_ones(
    admin_client_: Client,
) -> None:
    from django_blamequeue.models import Schedule

    call = '{"__args__": [1, 2], "__kwargs__": {}}'
    refused = text(admin_client_.post(f"{SCHEDULES}add/", schedule_form(payload=call)))
    assert "This schedule calls demo.jobs.send_email(*[1, 2], **{}), which cannot bind" in refused
    assert not Schedule.objects.exists()
    allowed = schedule_form(overlap="allow", expires="600")
    assert admin_client_.post(f"{SCHEDULES}add/", allowed).status_code == 302
    assert Schedule.objects.values_list("overlap", "expires").get() == ("allow", 600.0)
    code = Schedule.objects.create(
        name="from-code", job="demo.jobs.send_email", interval=60, source="code", skipped=3
    )
    listing = text(admin_client_.get(SCHEDULES))
    assert "skip · 3 skipped" in listing and "allow" in listing
    form = schedule_form(name="from-code")
    assert admin_client_.post(f"{SCHEDULES}{code.pk}/change/", form).status_code == 403
