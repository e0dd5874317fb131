"""The console's search by arguments, bulk actions on all matches, attempt history and roles,
through Django's test client (the browser tests take the pictures)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.test import Client, RequestFactory

from django_blamequeue import queue
from django_blamequeue.admin import bulk
from django_blamequeue.backends import get_backend
from django_blamequeue.models import AuditEvent

from .conftest import staff
from .factories import make_failed, make_jobs, settle

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

JOB = "/admin/django_blamequeue/job/"
BULK = f"{JOB}bulk/"
Login = Callable[[User], Client]


def text(response: Any) -> str:
    return response.content.decode()


def listed(client: Client, **query: str) -> list[str]:
    response = client.get(f"{JOB}?{urlencode(query)}")
    assert response.status_code == 200, text(response)[:500]
    return sorted(re.findall(r'name="_selected_action" value="([0-9A-Z]{26})"', text(response)))


def state(job_id: str, backend: str | None = None) -> str:
    info = queue.get_job(job_id, backend=backend)
    assert info is not None
    return info.state


# -- search --------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["default", "postgres"])
def test_jobs_are_found_by_a_payload_value_at_a_json_path(
    admin_client_: Client, backend: str
) -> None:
    if backend == "postgres":
        from tests.conftest import need_server

        need_server("postgres")
    payloads = [
        {"customer_id": 1234, "order": {"lines": [{"sku": "A-1"}]}, "paid": True},
        {"customer_id": 99, "order": {"lines": [{"sku": "B-2"}]}, "paid": False},
        {"customer_id": "1234x"},
    ]
    ids = make_jobs("orders", 3, backend=backend, payloads=payloads)
    assert listed(admin_client_, backend=backend, arg="customer_id=1234") == [ids[0]]
    assert listed(admin_client_, backend=backend, arg="order.lines.0.sku=B-2") == [ids[1]]
    assert listed(admin_client_, backend=backend, arg="paid=false") == [ids[1]]
    assert listed(admin_client_, backend=backend, arg="missing=1") == []


def test_argument_search_survives_a_parallel_plan_on_postgresql(admin_client_: Client) -> None:
    """The payload function's exception block may not run in a parallel worker: a large
    table's parallel scan (here forced) must still answer."""
    from django.db import connections

    from tests.conftest import need_server

    need_server("postgres")
    ids = make_jobs("orders", 2, backend="postgres", payloads=[{"c": 1}, {"c": 2}])
    with connections["postgres"].cursor() as cur:
        cur.execute("SHOW server_version_num")
        knob = "debug_parallel_query" if int(cur.fetchone()[0]) >= 160000 else "force_parallel_mode"
        cur.execute(f"SET {knob} = on")
        try:
            assert listed(admin_client_, backend="postgres", arg="c=2") == [ids[1]]
        finally:
            cur.execute(f"RESET {knob}")


def test_a_bad_argument_path_is_refused_not_ignored(admin_client_: Client) -> None:
    make_jobs("orders", 1)
    response = admin_client_.get(f"{JOB}?arg=customer_id')--=1")
    assert listed(admin_client_) != []
    # Django's list answers a bad filter with its error redirect, never an unfiltered list.
    assert response.status_code == 302 and "e=1" in response["Location"]


def test_search_suggests_argument_values_from_recent_jobs(admin_client_: Client) -> None:
    make_jobs("orders", 2, payloads=[{"customer_id": 1234}, {"customer_id": 1234}])
    body = text(admin_client_.get(JOB))
    assert '<datalist id="bq-suggest-arg"><option value="customer_id=1234">' in body


def test_filters_by_error_class_and_text_user_path_and_time_combine(
    admin_client_: Client,
) -> None:
    timeouts = make_failed("hooks", 2, error="TimeoutError: read timed out")
    refused = make_failed("hooks", 1, error="ConnectionError: refused by peer")
    assert listed(admin_client_, error_class="TimeoutError") == sorted(timeouts)
    assert listed(admin_client_, error="REFUSED") == refused
    assert listed(admin_client_, error_class="TimeoutError", error="refused") == []
    info = queue.get_job(refused[0])
    assert info is not None
    day = info.created_at.date().isoformat()
    assert len(listed(admin_client_, created_after=day, created_before=day)) == 3
    assert listed(admin_client_, created_before="2000-01-01") == []
    # Origin: jobs enqueued while serving a request carry its user and path.
    from django_blamequeue.jobs import origin

    served = RequestFactory().post("/orders/42/")
    served.user = User.objects.create_user("alice")
    with origin.serving(served):
        mine = make_jobs("orders", 1)
    assert listed(admin_client_, user="alice") == mine
    assert listed(admin_client_, path="/orders/") == mine
    assert listed(admin_client_, path="/orders/", user="bob") == []


# -- bulk actions --------------------------------------------------------------------------
def confirm(client: Client, verb: str, **filters: str) -> tuple[str, dict[str, str]]:
    """The confirmation page and the form it posts."""
    response = client.get(BULK, {"verb": verb, "filters": urlencode(filters)})
    assert response.status_code == 200, text(response)[:300]
    body = text(response)
    form = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', body))
    form = {k: v.replace("&amp;", "&") for k, v in form.items()}
    form.pop("csrfmiddlewaretoken", None)
    return body, form


def test_retry_all_matching_confirms_n_and_a_bound_then_retries_only_those(
    client_as: Login,
) -> None:
    timeouts = make_failed("hooks", 3, error="TimeoutError: slow")
    other = make_failed("hooks", 1, error="ValueError: bad")
    client = client_as(staff("retrier", "view_job", "retry_job"))
    body, form = confirm(client, "retry", error_class="TimeoutError")
    assert re.search(r'id="bq-bulk-count">3 jobs<', body)
    assert 'id="bq-bulk-bound"' in body
    late = make_failed("hooks", 1, error="TimeoutError: after the confirmation")
    response = client.post(BULK, form)
    assert response.status_code == 302
    assert [state(i) for i in timeouts] == ["pending"] * 3
    assert state(other[0]) == "failed" and state(late[0]) == "failed"
    events = list(AuditEvent.objects.filter(action=bulk.ADMIN_BULK))
    assert len(events) == 1
    event = events[0]
    assert event.user == "retrier"
    assert event.data["verb"] == "retry" and event.data["count"] == 3
    assert event.data["confirmed_count"] == 3
    assert event.data["filter"] == {"error_class": "TimeoutError"}


def test_a_large_bulk_action_runs_in_batches_over_several_requests(
    client_as: Login, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk, "BATCH", 2)
    monkeypatch.setattr(bulk, "BUDGET", 0.0)  # one batch a request
    ids = make_jobs("bulky", 5)
    client = client_as(staff("mover", "view_job", "move_job"))
    _, form = confirm(client, "move", queue="bulky")
    form["to_queue"] = "elsewhere"
    requests = 0
    while True:
        response = client.post(BULK, form)
        requests += 1
        if response.status_code == 302:
            break
        body = text(response)
        assert 'id="bq-bulk-next"' in body
        form = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', body))
        form = {k: v.replace("&amp;", "&") for k, v in form.items()}
        assert requests < 10
    assert requests == 3  # 2 + 2 + 1: a short batch is the last
    assert {queue.get_job(i).queue for i in ids} == {"elsewhere"}  # type: ignore[union-attr]
    assert AuditEvent.objects.filter(action=bulk.ADMIN_BULK).count() == 1


def test_checked_rows_can_be_moved_reprioritised_and_deleted(client_as: Login) -> None:
    ids = make_jobs("x", 3)
    client = client_as(staff("editor", "view_job", "move_job", "reprioritize_job", "purge_queue"))
    for action, extra in (
        ("move_selected", {"to_queue": "y"}),
        ("reprioritize_selected", {"to_priority": "7"}),
        ("delete_selected_jobs", {}),
    ):
        chosen = ids[:2]
        response = client.post(JOB, {"action": action, "_selected_action": chosen, "index": 0})
        assert response.status_code == 302 and response["Location"].startswith(BULK)
        body = text(client.get(response["Location"]))
        assert re.search(r'id="bq-bulk-count">2 jobs<', body), action
        form = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', body))
        form = {k: v.replace("&amp;", "&") for k, v in form.items()}
        form.update(extra)
        form["job_id"] = chosen  # type: ignore[assignment]
        assert client.post(BULK, form).status_code == 302
    assert queue.get_job(ids[0]) is None and queue.get_job(ids[1]) is None
    untouched = queue.get_job(ids[2])
    assert untouched is not None and untouched.queue == "x" and untouched.priority == 0


def test_bulk_actions_refuse_undocumented_filters(admin_client_: Client) -> None:
    ids = make_jobs("x", 2)
    token = get_backend().claim(["x"], 1, 30)[0].token
    for filters in ({"lease_token": token}, {"lease_token__startswith": token[:1]}):
        response = admin_client_.get(BULK, {"verb": "delete", "filters": urlencode(filters)})
        assert response.status_code == 400
        assert "not a job list filter" in text(response)
    assert all(queue.get_job(i) is not None for i in ids)


def test_bulk_actions_act_only_on_a_local_backends_job_list(admin_client_: Client) -> None:
    ids = make_jobs("x", 1)
    response = admin_client_.get(BULK, {"verb": "delete", "filters": "backend=redis"})
    assert response.status_code == 400
    assert "has no job list" in text(response)
    assert queue.get_job(ids[0]) is not None


# -- attempt history -----------------------------------------------------------------------
def test_job_page_shows_each_attempt_and_links_the_rounds_of_dlq_retries(
    admin_client_: Client,
) -> None:
    [job_id] = make_failed("hooks", 1, error="TimeoutError: first")
    assert queue.dlq_retry(job_id)
    settle("hooks", ["failed"], error="ValueError: second")
    body = text(admin_client_.get(f"{JOB}{job_id}/change/"))
    table = body.split('id="bq-attempts"')[1].split("Audit trail")[0]
    assert table.count('data-outcome="failed"') == 2
    assert "TimeoutError: first" in table and "ValueError: second" in table
    assert 'id="bq-round-1"' in table and 'id="bq-round-2"' in table
    assert 'href="#bq-round-2"' in table and 'href="#bq-round-1"' in table
    assert table.count("<summary>traceback</summary>") == 2


# -- roles ---------------------------------------------------------------------------------
def test_a_read_only_operator_sees_every_page_without_action_buttons(client_as: Login) -> None:
    [failed] = make_failed("hooks", 1)
    [waiting] = make_jobs("hooks", 1)
    client = client_as(staff("viewer", "view_job", "view_auditevent", "view_schedule"))
    flow = queue.enqueue_flow("f", [{"name": "a"}, {"name": "b", "depends_on": ["a"]}])
    pages = {
        "flow": f"{JOB}flow/{flow['flow_id']}/",
        "limits": f"{JOB}queues/limits/?queue=hooks",
        "schedules": "/admin/django_blamequeue/schedule/",
        "audit log": "/admin/django_blamequeue/auditevent/",
        "list": JOB,
        "failed job": f"{JOB}{failed}/change/",
        "waiting job": f"{JOB}{waiting}/change/",
        "overview": f"{JOB}overview/",
        "dlq": f"{JOB}dlq/?queue=hooks",
        "charts": f"{JOB}charts/",
        "workers": f"{JOB}workers/",
    }
    for page, url in pages.items():
        response = client.get(url)
        assert response.status_code == 200, page
        body = text(response)
        # Django's own forms: the log-out button and the list's form (here with no actions).
        for own in ('id="logout-form" method="post"', 'id="changelist-form" method="post"'):
            body = body.replace(own, "")
        assert 'method="post"' not in body, page
        assert "bq-bulk-all" not in body, page
        assert '<select name="action"' not in body, page  # the list's action menu


ACTIONS = [
    ("retry", "retry_job"),
    ("cancel", "cancel_job"),
    ("delete", "purge_queue"),
    ("move", "move_job"),
    ("priority", "reprioritize_job"),
]


@pytest.mark.parametrize(("verb", "codename"), ACTIONS)
def test_each_bulk_action_needs_its_own_permission(
    client_as: Login, verb: str, codename: str
) -> None:
    ids = make_failed("hooks", 2)
    others = [c for _, c in ACTIONS if c != codename]
    form = {
        "verb": verb,
        "filters": "queue=hooks",
        "bound": "2999-01-01T00:00:00+00:00",
        "count": "2",
        "to_queue": "z",
        "to_priority": "3",
    }
    denied = client_as(staff("others", "view_job", *others))
    assert denied.get(BULK, {"verb": verb, "filters": "queue=hooks"}).status_code == 403
    assert denied.post(BULK, form).status_code == 403
    assert [state(i) for i in ids] == ["failed", "failed"]
    offered = f'<option value="{verb}">'
    assert offered not in text(denied.get(JOB))
    allowed = client_as(staff("allowed", "view_job", codename))
    assert offered in text(allowed.get(JOB))
    assert allowed.post(BULK, form).status_code == 302
    assert AuditEvent.objects.filter(action=bulk.ADMIN_BULK, user="allowed").count() == 1
