"""blamequeue.W008 (``manage.py check --deploy``): waiting jobs and schedules
whose job name no handler of the code about to run answers, with counts, on every backend."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import job, queue
from django_blamequeue.checks import check_handlers
from django_blamequeue.jobs import registry
from django_blamequeue.models import Schedule
from tests.conftest import ALL_BACKENDS, backend_id, isolate, need_server

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


@pytest.fixture
def gone() -> Iterator[Any]:
    """A job that existed when its jobs were enqueued, and is gone from the code since."""

    @job(queue="w8", name="tests.w8.gone")
    def old(payload: Any) -> None: ...

    yield old
    registry.unregister("tests.w8.gone")


@pytest.mark.parametrize("backend", ALL_BACKENDS, ids=backend_id)
def test_waiting_jobs_of_a_name_no_handler_answers_are_w008_with_their_count(
    backend: str, gone: Any, settings: SettingsWrapper
) -> None:
    need_server(backend)
    isolate(settings, backend, "w8")
    gone.enqueue_many([1, 2], backend=backend)
    gone.enqueue(3, backend=backend, delay=3600)
    queue.enqueue("w8", {}, backend=backend)  # named after its queue: a consume(handler) job
    registry.unregister("tests.w8.gone")  # the new code no longer has it
    found = [m for m in check_handlers(None) if m.id == "blamequeue.W008"]
    mine = [m.msg for m in found if f"backend {backend!r}" in m.msg]
    assert mine == [
        f"3 waiting job(s) of backend {backend!r} on queue 'w8' name job 'tests.w8.gone', which no "
        "handler of this code answers: workers hand them back until one has it, and they fail "
        "after MISSING_HANDLER_TIMEOUT"
    ]


def test_a_schedule_of_a_job_no_handler_answers_is_w008_when_made_in_the_admin(
    settings: SettingsWrapper,
) -> None:
    """A ``SCHEDULES`` entry is the plain check's E041 (tests/unit/test_checks_schedules.py),
    so W008 names only the admin's rows: each problem once."""
    settings.BLAMEQUEUE = {
        **settings.BLAMEQUEUE,
        "SCHEDULES": {"nightly": {"job": "tests.w8.nowhere", "cron": "0 3 * * *"}},
    }
    Schedule.objects.create(name="hourly", job="tests.w8.nowhere2", interval=3600)
    messages = [m.msg for m in check_handlers(None) if m.id == "blamequeue.W008"]
    assert messages == [
        "schedule 'hourly' fires job 'tests.w8.nowhere2', which no handler of this code answers"
    ]


def test_w008_runs_with_check_deploy() -> None:
    queue.enqueue("w8b", {"a": 1})
    Schedule.objects.create(name="x", job="tests.w8.nowhere", interval=60)
    out = io.StringIO()
    call_command("check", "--deploy", stdout=out, stderr=out, fail_level="ERROR")
    assert "blamequeue.W008" in out.getvalue() and "schedule 'x'" in out.getvalue()
