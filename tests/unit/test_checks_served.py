"""Blamequeue.W007: jobs that a plain ``runworker`` would never claim.

A plain ``runworker`` consumes every queue with a registered job, on ``DEFAULT_BACKEND``. A
schedule on another queue, or a job or schedule on another backend, waits forever unless a
worker is started for it by name: the check says so before anything is deployed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core import checks
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import conf, job
from django_blamequeue.checks import check_queues_served
from django_blamequeue.jobs import registry

BACKENDS = {"default": {"PROTOCOL": "local"}, "other": {"PROTOCOL": "local"}}


@pytest.fixture(autouse=True)
def jobs(settings: SettingsWrapper) -> Iterator[None]:
    settings.BLAMEQUEUE = {"BACKENDS": BACKENDS}
    conf.reset()

    @job(queue="w7-mail", name="tests.w7.mail")
    def mail(payload: Any) -> None: ...

    @job(queue="w7-sync", name="tests.w7.sync", backend="other")
    def sync(payload: Any) -> None: ...

    yield
    registry.unregister("tests.w7.mail")
    registry.unregister("tests.w7.sync")
    conf.reset()


def w007(
    settings: SettingsWrapper, about: str, **schedules: dict[str, Any]
) -> list[checks.CheckMessage]:
    """The W007 messages that start with ``about`` (other tests register jobs of their own)."""
    settings.BLAMEQUEUE = {"BACKENDS": BACKENDS, "SCHEDULES": schedules}
    found = check_queues_served(None)
    assert {m.id for m in found} <= {"blamequeue.W007"}
    return [m for m in found if m.msg.startswith(about)]


def test_a_schedule_on_a_queue_no_registered_job_uses_is_w007_with_the_command_to_run(
    settings: SettingsWrapper,
) -> None:
    [message] = w007(
        settings, "SCHEDULES", tick={"job": "tests.w7.mail", "interval": 60, "queue": "w7-ops"}
    )
    assert isinstance(message, checks.Warning)
    assert message.msg.startswith(
        "SCHEDULES[\"tick\"] fires 'tests.w7.mail' on queue 'w7-ops', which no registered @job "
        "uses: a plain runworker does not consume it"
    )
    assert message.hint == (
        'Start "manage.py runworker w7-ops" too, or drop "queue" to use the job\'s own '
        "('w7-mail')."
    )


def test_a_schedule_on_its_jobs_own_queue_or_another_served_one_is_fine(
    settings: SettingsWrapper,
) -> None:
    found = w007(
        settings,
        "SCHEDULES",
        own={"job": "tests.w7.mail", "cron": "0 3 * * *"},
        served={"job": "tests.w7.mail", "interval": 60, "queue": "w7-mail"},
    )
    assert found == []


def test_a_job_stored_on_another_backend_is_w007_naming_the_backend_flag(
    settings: SettingsWrapper,
) -> None:
    assert w007(settings, "@job 'tests.w7.") == [
        checks.Warning(
            "@job 'tests.w7.sync' is stored on backend 'other', but a plain runworker consumes "
            "only DEFAULT_BACKEND 'default': its jobs wait until a worker is started for that "
            "backend",
            hint='Start "manage.py runworker w7-sync --backend other" too.',
            id="blamequeue.W007",
        )
    ]


def test_a_schedule_sent_to_another_backend_is_w007(settings: SettingsWrapper) -> None:
    found = w007(
        settings, "SCHEDULES", away={"job": "tests.w7.mail", "interval": 60, "backend": "other"}
    )
    assert [m.hint for m in found] == ['Start "manage.py runworker w7-mail --backend other" too.']


def test_a_disabled_schedule_and_an_unknown_job_on_its_own_queue_are_left_alone(
    settings: SettingsWrapper,
) -> None:
    found = w007(
        settings,
        "SCHEDULES",
        off={"job": "tests.w7.mail", "interval": 60, "queue": "w7-ops", "enabled": False},
        unknown={"job": "tests.w7.nope", "interval": 60},
    )
    assert found == []


def test_it_is_a_registered_system_check(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {
        "BACKENDS": BACKENDS,
        "SCHEDULES": {"tick": {"job": "tests.w7.mail", "interval": 60, "queue": "w7-ops"}},
    }
    found = checks.run_checks(tags=["blamequeue"])
    assert any(m.id == "blamequeue.W007" and 'SCHEDULES["tick"]' in m.msg for m in found)
