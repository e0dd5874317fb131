"""Fire times of recurring jobs (SPEC §5): cron expressions or fixed intervals, in a timezone.

Pure functions: given the last fire and now, which occurrence (if any) is due. Missed fires
coalesce: only the latest due occurrence is answered.
"""

from __future__ import annotations

from datetime import datetime, timedelta
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
    local_now = now.astimezone(zone)
    previous: datetime = croniter(cron, local_now).get_prev(datetime)
    if previous.tzinfo is None:
        previous = previous.replace(tzinfo=zone)
    return previous if previous > last else None


def next_fires(*, cron: str, interval: float | None, tz: str, after: datetime, count: int = 3) -> list[datetime]:
    """The next ``count`` fire times after ``after`` (for the admin's preview)."""
    if interval:
        return [after + timedelta(seconds=interval * (i + 1)) for i in range(count)]
    zone = ZoneInfo(tz or "UTC")
    it = croniter(cron, after.astimezone(zone))
    return [it.get_next(datetime) for _ in range(count)]
