"""Fire times: ``latest_due`` and ``next_fires`` as tables — cron in a timezone across
both daylight-saving changes, fixed intervals, missed fires coalescing into the latest one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from django_blamequeue.core.schedules import latest_due, next_fires

BERLIN = "Europe/Berlin"  # CET +01:00; CEST +02:00 from 2024-03-31 01:00Z to 2024-10-27 01:00Z


def z(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("cron", "tz", "last", "now", "due"),
    [
        # hourly, UTC: nothing until the hour; the hour itself is due; then nothing again
        ("0 * * * *", "UTC", z(2024, 1, 1, 9), z(2024, 1, 1, 9, 59, 59), None),
        ("0 * * * *", "UTC", z(2024, 1, 1, 9), z(2024, 1, 1, 10), z(2024, 1, 1, 10)),
        ("0 * * * *", "UTC", z(2024, 1, 1, 9), z(2024, 1, 1, 10, 30), z(2024, 1, 1, 10)),
        ("0 * * * *", "UTC", z(2024, 1, 1, 10), z(2024, 1, 1, 10, 30), None),
        # down from 09:00 to 13:20: four fires missed, one answered — the latest
        ("0 * * * *", "UTC", z(2024, 1, 1, 9), z(2024, 1, 1, 13, 20), z(2024, 1, 1, 13)),
        ("*/15 * * * *", "UTC", z(2024, 1, 1, 9), z(2024, 1, 3, 0, 7), z(2024, 1, 3, 0, 0)),
        # daily 09:00 Berlin keeps its wall-clock time across spring-forward: 08:00Z, then 07:00Z
        ("0 9 * * *", BERLIN, z(2024, 3, 29, 8), z(2024, 3, 30, 8), z(2024, 3, 30, 8)),
        ("0 9 * * *", BERLIN, z(2024, 3, 30, 8), z(2024, 3, 31, 6, 59), None),
        ("0 9 * * *", BERLIN, z(2024, 3, 30, 8), z(2024, 3, 31, 7), z(2024, 3, 31, 7)),
        # ... and across fall-back: 07:00Z, then 08:00Z
        ("0 9 * * *", BERLIN, z(2024, 10, 26, 7), z(2024, 10, 27, 7, 30), None),
        ("0 9 * * *", BERLIN, z(2024, 10, 26, 7), z(2024, 10, 27, 8), z(2024, 10, 27, 8)),
        # 02:30 does not exist on 2024-03-31: it fires once, at the end of the gap (03:00 CEST)
        ("30 2 * * *", BERLIN, z(2024, 3, 30, 1, 30), z(2024, 3, 31, 0, 59), None),
        ("30 2 * * *", BERLIN, z(2024, 3, 30, 1, 30), z(2024, 3, 31, 1, 45), z(2024, 3, 31, 1)),
        # 02:30 happens twice on 2024-10-27 (00:30Z CEST, 01:30Z CET): a daily job fires once
        (
            "30 2 * * *",
            BERLIN,
            z(2024, 10, 26, 0, 30),
            z(2024, 10, 27, 0, 45),
            z(2024, 10, 27, 0, 30),
        ),
        ("30 2 * * *", BERLIN, z(2024, 10, 27, 0, 30), z(2024, 10, 27, 1, 45), None),
        (
            "30 2 * * *",
            BERLIN,
            z(2024, 10, 26, 0, 30),
            z(2024, 10, 27, 1, 45),
            z(2024, 10, 27, 1, 30),
        ),
        # ... while an hourly job fires on both passes: each is an hour of its own
        ("0 * * * *", BERLIN, z(2024, 10, 27, 0), z(2024, 10, 27, 1, 10), z(2024, 10, 27, 1)),
    ],
)
def test_latest_due_for_cron(
    cron: str, tz: str, last: datetime, now: datetime, due: datetime | None
) -> None:
    assert latest_due(cron=cron, interval=None, tz=tz, last=last, now=now) == due


@pytest.mark.parametrize(
    ("interval", "last", "now", "due"),
    [
        (60.0, z(2024, 1, 1, 9), z(2024, 1, 1, 9, 0, 59), None),
        (60.0, z(2024, 1, 1, 9), z(2024, 1, 1, 9, 1), z(2024, 1, 1, 9, 1)),
        (
            60.0,
            z(2024, 1, 1, 9),
            z(2024, 1, 1, 9, 7, 30),
            z(2024, 1, 1, 9, 7),
        ),  # coalesced, on the grid
        (90.0, z(2024, 1, 1, 9), z(2024, 1, 1, 9, 4, 40), z(2024, 1, 1, 9, 4, 30)),
        (
            3600.0,
            z(2024, 10, 27, 0),
            z(2024, 10, 27, 2),
            z(2024, 10, 27, 2),
        ),  # the calendar is ignored
    ],
)
def test_latest_due_for_intervals(
    interval: float, last: datetime, now: datetime, due: datetime | None
) -> None:
    assert latest_due(cron="", interval=interval, tz=BERLIN, last=last, now=now) == due


@pytest.mark.parametrize(
    ("cron", "tz", "after", "fires"),
    [
        (
            "0 9 * * *",
            BERLIN,
            z(2024, 3, 29, 12),
            [z(2024, 3, 30, 8), z(2024, 3, 31, 7), z(2024, 4, 1, 7)],
        ),
        (
            "0 9 * * *",
            BERLIN,
            z(2024, 10, 26, 12),
            [z(2024, 10, 27, 8), z(2024, 10, 28, 8), z(2024, 10, 29, 8)],
        ),
        (
            "30 2 * * *",
            BERLIN,
            z(2024, 10, 26, 12),
            [z(2024, 10, 27, 0, 30), z(2024, 10, 28, 1, 30), z(2024, 10, 29, 1, 30)],
        ),
        (
            "0 * * * *",
            BERLIN,
            z(2024, 10, 26, 23, 30),
            [z(2024, 10, 27, 0), z(2024, 10, 27, 1), z(2024, 10, 27, 2)],
        ),
        (
            "0 * * * *",
            BERLIN,
            z(2024, 3, 31, 0, 30),
            [z(2024, 3, 31, 1), z(2024, 3, 31, 2), z(2024, 3, 31, 3)],
        ),
        (
            "0 0 1 * *",
            "America/New_York",
            z(2024, 1, 15),
            [z(2024, 2, 1, 5), z(2024, 3, 1, 5), z(2024, 4, 1, 4)],
        ),
    ],
)
def test_next_fires_for_cron(cron: str, tz: str, after: datetime, fires: list[datetime]) -> None:
    got = next_fires(cron=cron, interval=None, tz=tz, after=after)
    assert got == fires
    assert all(f.utcoffset() is not None for f in got)


def test_next_fires_for_an_interval() -> None:
    assert next_fires(cron="", interval=600, tz="UTC", after=z(2024, 1, 1)) == [
        z(2024, 1, 1, 0, 10),
        z(2024, 1, 1, 0, 20),
        z(2024, 1, 1, 0, 30),
    ]


def test_fire_times_agree_with_each_other() -> None:
    """Every fire ``next_fires`` previews is what ``latest_due`` answers at that instant."""
    last = z(2024, 10, 26, 12)
    for fire in next_fires(cron="30 2 * * *", interval=None, tz=BERLIN, after=last, count=5):
        assert latest_due(cron="30 2 * * *", interval=None, tz=BERLIN, last=last, now=fire) == fire
        last = fire
