"""blamequeue.E041: a schedule naming a job this code does not register is an error of the
plain ``manage.py check``, with the nearest names (a nightly job that would never run)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import conf, job
from django_blamequeue.checks import check_schedule_jobs
from django_blamequeue.jobs import registry

pytestmark = pytest.mark.django_db  # the plain check reads the migrations (E040)


@pytest.fixture(autouse=True)
def report_job() -> Iterator[None]:
    @job(queue="e41", name="shop.jobs.nightly_report")
    def nightly_report(payload: Any) -> None: ...

    yield
    registry.unregister("shop.jobs.nightly_report")
    conf.reset()


def schedules(settings: SettingsWrapper, **entries: dict[str, Any]) -> None:
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "SCHEDULES": entries}


def test_a_schedule_of_an_unknown_job_fails_plain_check_with_the_nearest_name(
    settings: SettingsWrapper,
) -> None:
    schedules(settings, nightly={"job": "shop.jobs.nightly_reprot", "cron": "0 3 * * *"})
    out = io.StringIO()
    with pytest.raises(SystemCheckError) as caught:
        call_command("check", stdout=out, stderr=out)
    text = str(caught.value)
    assert (
        """(blamequeue.E041) SCHEDULES["nightly"] fires job 'shop.jobs.nightly_reprot', """
        "which no @job, @flow or @task of this code registers: it would never run" in text
    ), text
    assert "HINT: Did you mean 'shop.jobs.nightly_report'?" in text


def test_known_and_disabled_schedules_pass(settings: SettingsWrapper) -> None:
    schedules(
        settings,
        nightly={"job": "shop.jobs.nightly_report", "cron": "0 3 * * *"},
        old={"job": "shop.jobs.gone", "interval": 60, "enabled": False},
    )
    assert check_schedule_jobs(None) == []
