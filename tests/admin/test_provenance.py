"""The blame trail and jobs about objects in the admin (docs/effects.md): the job page links the
object and shows what enqueued the job up to the root; a user's ModelAdmin with
``JobTimelineMixin`` lists the object's jobs; the job list filters and searches both."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from django_blamequeue import current_job, job, queue
from django_blamequeue.jobs import registry
from django_blamequeue.models import AuditEvent
from django_blamequeue.testing import capture_jobs
from tests.procapp.models import Write

pytestmark = pytest.mark.django_db(databases="__all__")
JOBS = "/admin/django_blamequeue/job/"


@pytest.fixture
def chained() -> Any:
    """A job that enqueues a job about a ``Write`` (both run here)."""

    @job(queue="trail", name="tests.admin.parent")
    def parent(payload: Any) -> None:
        obj = Write.objects.get(pk=payload["pk"])
        child.enqueue({}, about=obj)  # the child's site: this line

    @job(queue="trail", name="tests.admin.child")
    def child(payload: Any) -> str:
        return current_job().job_id

    yield parent
    registry.unregister("tests.admin.parent")
    registry.unregister("tests.admin.child")


def a_write() -> Write:
    return Write.objects.create(job_id="x", attempt=1, token="t")


def test_the_job_page_links_the_object_and_shows_the_chain_to_the_root(
    admin_client_: Client, chained: Any
) -> None:
    obj = a_write()
    with capture_jobs() as jobs:
        root_id = chained.enqueue({"pk": obj.pk}).job_id  # the root's site: this line
        jobs.run_jobs()
    [child] = queue.jobs_about(obj)
    html = admin_client_.get(f"{JOBS}{child.job_id}/change/").content.decode()
    about = reverse("admin:procapp_write_change", args=[obj.pk])
    assert f'<a href="{about}">procapp.write:{obj.pk}</a>' in html
    chain = re.search(r'<ol class="bq-chain" id="bq-chain">(.*?)</ol>', html, re.S)
    assert chain is not None
    steps = re.findall(r"<li>(.*?)</li>", chain.group(1), re.S)
    assert len(steps) == 2
    assert f"enqueued by job {root_id} (tests.admin.parent) at tests/admin/" in steps[0]
    assert "in chained.parent" in steps[0]
    assert steps[1].startswith("enqueued at tests/admin/test_provenance.py:"), steps[1]
    assert "test_provenance.py" in steps[1] and "test_the_job_page_links_the_object" in steps[1]


def test_a_model_admin_with_the_mixin_shows_the_objects_job_timeline(
    admin_client_: Client,
) -> None:
    obj, other = a_write(), a_write()
    ids = [queue.enqueue("trail", {"i": i}, about=obj).job_id for i in range(3)]
    queue.enqueue("trail", {}, about=other)
    html = admin_client_.get(reverse("admin:procapp_write_change", args=[obj.pk])).content
    rows = re.findall(rb'<tr data-job-id="(\w+)" data-state="pending">', html)
    assert [r.decode() for r in rows] == ids[::-1]
    assert f"{JOBS}{ids[0]}/change/".encode() in html


def test_the_timeline_is_shown_only_to_those_who_may_view_jobs(client_as: Any) -> None:
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user("clerk", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["change_write"]))
    obj = a_write()
    queue.enqueue("trail", {}, about=obj)
    html = client_as(user).get(reverse("admin:procapp_write_change", args=[obj.pk])).content
    assert b'id="bq-timeline"' not in html


def test_the_job_list_filters_by_model_and_object_and_by_what_enqueued(
    admin_client_: Client,
) -> None:
    obj = a_write()
    about = queue.enqueue("trail", {}, about=obj).job_id
    plain = queue.enqueue("trail", {}).job_id

    def listed(query: str) -> set[str]:
        html = admin_client_.get(f"{JOBS}?{query}").content.decode()
        return set(re.findall(rf'href="{JOBS}(\w+)/change/', html)) & {about, plain}

    assert listed("about=procapp.write") == {about}
    assert listed(f"about=procapp.write:{obj.pk}") == {about}
    assert listed("about=auth.user") == set()
    assert listed("origin=code") == {about, plain}
    assert listed("origin=parent_job") == set()
    assert listed(f"q=procapp.write:{obj.pk}") == {about}
    assert listed("q=test_provenance.py") == {about, plain}


def test_an_atomic_jobs_rolled_back_attempt_shows_lock_lost_in_its_audit_trail(
    admin_client_: Client,
) -> None:
    @job(queue="trail", name="tests.admin.atomic", atomic=True)
    def atomic(payload: Any) -> None:
        Write.objects.create(job_id=current_job().job_id, attempt=1, token="t")

    try:
        with capture_jobs() as jobs:
            job_id = atomic.enqueue({}).job_id
            jobs.run_jobs(chaos="takeover")
    finally:
        registry.unregister("tests.admin.atomic")
    assert AuditEvent.objects.filter(job_id=job_id, action="system.queue.lock_lost").exists()
    html = admin_client_.get(f"{JOBS}{job_id}/change/").content.decode()
    row = re.search(r'<tr data-action="system.queue.lock_lost">(.*?)</tr>', html, re.S)
    assert row is not None and "rolled_back" in row.group(1)
