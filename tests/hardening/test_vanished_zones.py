"""Fuzzing schedules whose time zone this host's tz database lacks (a row saved on another
host, or before a tz database update): any text in the ``timezone`` column. The schedules
list and the schedule's page render and say so, ``blamequeue schedules`` lists it, and the
scheduler skips a cron schedule of that zone, counted as failed (an interval one fires: it
counts seconds), while the schedules beside it fire."""

from __future__ import annotations

import io
import zoneinfo
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from django_blamequeue.models import Job, Schedule
from django_blamequeue.sweeper.scheduler import Scheduler

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

SCHEDULES = "/admin/django_blamequeue/schedule/"
T0 = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)  # a DST night in Europe
#: Names a tz database once had or another has, and text that is no zone name at all.
ZONES = st.one_of(
    st.sampled_from(
        ["Mars/Olympus", "Europe/Kyiv2", "America/Ciudad_Juarez_old", "../../etc/passwd"]
    ),
    st.text(max_size=60),
)


def resolves(name: str) -> bool:
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


@pytest.fixture
def reader(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


@settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(zone=ZONES, cron=st.booleans())
def test_a_schedule_whose_zone_is_gone_renders_lists_and_is_skipped_while_others_fire(
    reader: Client, zone: str, cron: bool
) -> None:
    assume(zone != "" and not resolves(zone))  # "" is UTC, as in SCHEDULES
    Schedule.objects.all().delete()
    Job.objects.all().delete()
    when = {"cron": "30 2 * * *"} if cron else {"interval": 60}
    gone = Schedule.objects.create(
        name="gone", job="demo.jobs.send_email", timezone=zone, last_fired_at=T0, **when
    )
    Schedule.objects.create(name="fine", job="demo.jobs.send_email", interval=60, last_fired_at=T0)

    listing = reader.get(SCHEDULES)
    assert listing.status_code == 200
    assert "unknown time zone" in listing.content.decode()
    page = reader.get(f"{SCHEDULES}{gone.pk}/change/")
    assert page.status_code == 200
    assert "is not a time zone this host knows" in page.content.decode()

    out = io.StringIO()
    call_command("blamequeue", "schedules", stdout=out)
    assert "gone" in out.getvalue() and "fine" in out.getvalue()

    counts = Scheduler().run_once(T0 + timedelta(hours=3))
    if cron:  # its wall-clock times need the zone: skipped, counted, tried at the next pass
        assert counts == {"fired": 1, "skipped": 0, "failed": 1}, counts
    else:  # an interval is counted in seconds, whatever the zone
        assert counts == {"fired": 2, "skipped": 0, "failed": 0}, counts
    assert Job.objects.count() == counts["fired"]
