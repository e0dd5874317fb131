"""The console on backends outside the database: Redis and SQS screens go through the
backend API — the overview's counts, the DLQ with its error, retry and purge, each audited
with the acting user — never through the job table."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from django.test import Client

from django_blamequeue import queue
from django_blamequeue.admin import operations
from django_blamequeue.models import AuditEvent, Job
from tests.conftest import isolate, need_server

from .factories import make_failed, make_jobs

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

JOB = "/admin/django_blamequeue/job/"
_runs = itertools.count()


@pytest.fixture(params=["redis", "sqs"])
def remote(request: pytest.FixtureRequest, settings: Any) -> str:
    """A remote backend with a key / queue prefix of its own for this test."""
    alias: str = request.param
    need_server(alias)
    isolate(settings, alias, f"adm{next(_runs)}")
    return alias


def text(response: Any) -> str:
    return str(response.content.decode())


def test_the_overview_counts_a_remote_backends_queues(admin_client_: Client, remote: str) -> None:
    make_jobs("remote-q", 3, backend=remote)
    make_failed("remote-dead", 1, backend=remote)
    body = text(admin_client_.get(f"{JOB}overview/"))
    row = re.search(rf'<tr data-backend="{remote}" data-queue="remote-q">(.*?)</tr>', body, re.S)
    assert row is not None
    assert re.search(r'data-state="pending">3<', row.group(1))  # counted, not a table link
    dead = re.search(
        rf'<tr data-backend="{remote}" data-queue="remote-dead">(.*?)</tr>', body, re.S
    )
    assert dead is not None and "DLQ (1)" in dead.group(1)
    assert not Job.objects.exists()  # nothing of it lives in the job table


def test_the_dlq_screen_lists_and_retries_remote_dead_letters(
    admin_client_: Client, remote: str
) -> None:
    [job_id] = make_failed("remote-dead", 1, backend=remote, error="ValueError: nope")
    body = text(admin_client_.get(f"{JOB}dlq/?backend={remote}&queue=remote-dead"))
    assert job_id in body and "ValueError: nope" in body
    response = admin_client_.post(
        f"{JOB}dlq/retry/", {"backend": remote, "queue": "remote-dead", "job_id": [job_id]}
    )
    assert response.status_code == 302
    info = queue.get_job(job_id, backend=remote)
    assert info is not None and (info.state, info.attempts) == ("pending", 0)
    event = AuditEvent.objects.get(action=operations.ADMIN_RETRY)
    assert (event.user, event.job_id, event.backend) == ("root", job_id, remote)


def test_purge_confirms_the_remote_count_and_deletes_the_waiting_jobs(
    admin_client_: Client, remote: str
) -> None:
    make_jobs("remote-q", 4, backend=remote)
    body = text(admin_client_.get(f"{JOB}purge/?backend={remote}&queue=remote-q"))
    assert "Delete all 4 waiting job(s)" in body
    before = re.search(r'name="before" value="([^"]+)"', body)
    assert before, "the confirmation carries no time bound"
    make_jobs("remote-q", 3, backend=remote)  # after the confirmation: kept
    form = {"backend": remote, "queue": "remote-q", "count": "4", "before": before.group(1)}
    response = admin_client_.post(f"{JOB}purge/", form)
    assert response.status_code == 302
    assert queue.size("remote-q", backend=remote) == 3
    event = AuditEvent.objects.get(action=operations.ADMIN_PURGE)
    assert (event.user, event.backend, event.data["count"]) == ("root", remote, 4)


def test_a_remote_jobs_page_reads_through_the_backend(admin_client_: Client, remote: str) -> None:
    [job_id] = make_failed("remote-dead", 1, backend=remote, error="ValueError: nope")
    body = text(admin_client_.get(f"{JOB}{job_id}/change/?backend={remote}"))
    assert "ValueError: nope" in body and "remote-dead" in body


def test_a_remote_jobs_page_shows_its_checkpoint(admin_client_: Client, remote: str) -> None:
    from django_blamequeue.backends import get_backend

    job_id = queue.enqueue("remote-cp", {}, backend=remote).job_id
    engine = get_backend(remote)
    [c] = engine.claim(["remote-cp"], 1, 30)
    engine.save_checkpoints([(job_id, c.token, '{"offset":7000}')])
    body = text(admin_client_.get(f"{JOB}{job_id}/change/?backend={remote}"))
    assert 'id="bq-checkpoint"' in body and "&quot;offset&quot;: 7000" in body
