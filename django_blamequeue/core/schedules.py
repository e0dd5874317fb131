"""Fire times of recurring jobs: cron expressions or fixed intervals, in a timezone.

Pure functions: given the last fire and now, which occurrence (if any) is due. Missed fires
coalesce: only the latest due occurrence is answered. Answers are in UTC: an aware datetime on
the second pass of a fall-back hour (``fold=1``) compares unequal to every instant of another
zone (PEP 495), so local ones would be a trap for callers.

Cron times are wall-clock times in the schedule's timezone (croniter does the calendar). Across
daylight-saving changes: a wall time skipped by the spring-forward gap fires once, at the first
instant after the gap; a wall time repeated by the fall-back hour fires once, at its first pass,
unless the expression runs every hour (hour field ``*``), which fires on both passes since
each is an hour of its own. Intervals are absolute seconds and ignore the calendar.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter


def latest_due(
    *, cron: str, interval: float | None, tz: str, last: datetime, now: datetime
) -> datetime | None:
    """The latest occurrence in ``(last, now]``, or None if nothing is due."""
    if interval:
        if now < last + timedelta(seconds=interval):
            return None
        steps = int((now - last).total_seconds() // interval)
        return last + timedelta(seconds=steps * interval)
    zone = ZoneInfo(tz or "UTC")
    # croniter's get_prev is strictly before its start: start just after now, so an
    # occurrence exactly at now is due at now.
    local_now = (now + timedelta(microseconds=1)).astimezone(zone)
    previous: datetime = croniter(cron, local_now).get_prev(datetime)
    if previous.tzinfo is None:
        previous = previous.replace(tzinfo=zone)
    local = previous.astimezone(zone)
    if _second_pass(local, cron) and last >= local.replace(fold=0).astimezone(UTC):
        return None  # its first pass already fired
    due = previous.astimezone(UTC)
    return due if due > last else None


def next_fires(
    *, cron: str, interval: float | None, tz: str, after: datetime, count: int = 3
) -> list[datetime]:
    """The next ``count`` fire times after ``after`` (for the admin's preview), in UTC."""
    if interval:
        return [after + timedelta(seconds=interval * (i + 1)) for i in range(count)]
    zone = ZoneInfo(tz or "UTC")
    it = croniter(cron, after.astimezone(zone))
    fires: list[datetime] = []
    while len(fires) < count:
        fire = it.get_next(datetime).astimezone(zone)
        if not _second_pass(fire, cron):
            fires.append(fire.astimezone(UTC))
    return fires


def upcoming(
    *,
    cron: str,
    interval: float | None,
    tz: str,
    last_fired: datetime | None,
    now: datetime,
    count: int = 3,
) -> list[datetime]:
    """The next ``count`` fire times after ``now``, in UTC (the admin's and ``blamequeue
    schedules``' preview). An interval keeps to the grid of its last fire; a schedule never
    fired is anchored at ``now``, as the scheduler anchors it at the pass that first sees it."""
    if interval:
        last = last_fired or now
        if last < now:
            last += timedelta(seconds=interval * int((now - last) / timedelta(seconds=interval)))
        return next_fires(cron="", interval=interval, tz=tz, after=last, count=count)
    if not cron:
        return []
    return next_fires(cron=cron, interval=None, tz=tz, after=now, count=count)


def _second_pass(local: datetime, cron: str) -> bool:
    """A wall time on its second pass through a fall-back hour, for a job not run hourly."""
    first = local.replace(fold=0)
    return (
        local.fold == 1
        and local.utcoffset() != first.utcoffset()
        and croniter(cron).expanded[1] != ["*"]
    )


def cron_error(expr: str) -> str | None:
    """Why ``expr`` is not a 5-field cron expression, or None when it is one."""
    fields = expr.split()
    if len(fields) != 5:
        return f"has {len(fields)} fields; cron needs 5 (minute hour day month weekday)"
    for text, (label, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        for item in text.split(","):
            if error := _cron_item_error(item, low, high, names):
                return f"{label} field {text!r}: {error}"
    return None


_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
_CRON_FIELDS: tuple[tuple[str, int, int, Mapping[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, {m: i for i, m in enumerate(_MONTHS, 1)}),
    ("day-of-week", 0, 7, {d: i for i, d in enumerate(_DAYS)}),
)


def _cron_item_error(item: str, low: int, high: int, names: Mapping[str, int]) -> str | None:
    base, slash, step = item.partition("/")
    if slash and not (step.isascii() and step.isdigit() and int(step) > 0):
        return f"step {step!r} is not a positive integer"
    if base == "*":
        return None
    first, dash, last = base.partition("-")
    values = []
    for text in (first, last) if dash else (first,):
        value = int(text) if text.isascii() and text.isdigit() else names.get(text.lower())
        if value is None:
            return f"{text!r} is not a number" + (" or a name" if names else "")
        if not low <= value <= high:
            return f"{value} is outside {low}-{high}"
        values.append(value)
    if dash and values[0] > values[1]:
        return f"range {base!r} runs backwards"
    return None
