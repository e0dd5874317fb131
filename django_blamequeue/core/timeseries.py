"""The console's charts as data: what a worker tallies, the time buckets an engine keeps, and
the percentiles read back from them (docs/admin.md#charts).

A worker adds a ``Sample`` per (queue, job name) — counts of attempts by how they ended, and
histograms of wait and run times — and the sweeper adds each queue's depth. Every engine keeps
them in fixed buckets at three resolutions (``RESOLUTIONS``), each pruned after its window, so
the space they take is bounded by the number of (queue, name) pairs, never by the jobs.

Histograms have fixed bounds (``BOUNDS``), so the buckets of many workers and many names add
up exactly; a percentile read from them is an estimate within its bucket (interpolated).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

#: Upper bounds (seconds) of the histogram buckets; one more bucket holds everything above.
BOUNDS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0, 300.0)
SLOTS = len(BOUNDS) + 1
COUNTS = ("done", "failed", "retried", "cancelled")


@dataclass(frozen=True, slots=True)
class Resolution:
    """Buckets of ``step`` seconds, kept for ``keep`` seconds: the chart of ``label``."""

    label: str
    step: int
    keep: int
    span: int  # seconds a chart of this resolution shows

    @property
    def points(self) -> int:
        return self.span // self.step


HOUR, DAY = 3600, 86400
RESOLUTIONS: tuple[Resolution, ...] = (
    Resolution("hour", 60, 2 * HOUR, HOUR),  # 60 points of a minute
    Resolution("day", 600, 2 * DAY, DAY),  # 144 points of 10 minutes
    Resolution("week", 3600, 8 * DAY, 7 * DAY),  # 168 points of an hour
)
BY_LABEL = {r.label: r for r in RESOLUTIONS}


def slot(seconds: float) -> int:
    """The histogram bucket of a duration (negative clock skew counts as zero)."""
    return bisect_left(BOUNDS, max(0.0, seconds))


def histogram(values: Iterable[float]) -> tuple[int, ...]:
    counts = [0] * SLOTS
    for v in values:
        counts[slot(v)] += 1
    return tuple(counts)


def add(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """Two histograms (or counts) added; an empty one is zeros."""
    if not a:
        return tuple(b)
    if not b:
        return tuple(a)
    return tuple(x + y for x, y in zip(a, b, strict=True))


def percentile(counts: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0–1) of a histogram, interpolated linearly inside its bucket (the
    first bucket from 0, the last one answered as its lower bound); None when empty."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            if i == len(BOUNDS):
                return BOUNDS[-1]
            low = BOUNDS[i - 1] if i else 0.0
            return low + (BOUNDS[i] - low) * max(0.0, rank - seen) / n
        seen += n
    return BOUNDS[-1]  # pragma: no cover - rank <= total always ends the loop


def floor(t: datetime, step: int) -> datetime:
    """The start of the ``step``-second bucket holding ``t`` (UTC)."""
    seconds = int(t.timestamp())
    return datetime.fromtimestamp(seconds - seconds % step, UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """What happened on one queue to one job name since the last flush; ``name`` "" is the
    queue's own gauge (``depth``: its pending jobs, delayed included, when it was read)."""

    queue: str
    name: str = ""
    done: int = 0
    failed: int = 0
    retried: int = 0
    cancelled: int = 0
    wait: tuple[int, ...] = ()  # histogram: due (available_at) → started
    run: tuple[int, ...] = ()  # histogram: started → acked
    depth: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.queue, self.name)

    def plus(self, other: Sample) -> Sample:
        """Two samples of one key as one (depth: the later one's)."""
        return Sample(
            queue=self.queue,
            name=self.name,
            done=self.done + other.done,
            failed=self.failed + other.failed,
            retried=self.retried + other.retried,
            cancelled=self.cancelled + other.cancelled,
            wait=add(self.wait, other.wait),
            run=add(self.run, other.run),
            depth=other.depth if other.depth is not None else self.depth,
        )

    @property
    def empty(self) -> bool:
        return not (
            self.done or self.failed or self.retried or self.cancelled or self.depth is not None
        )


def merged(samples: Iterable[Sample]) -> list[Sample]:
    """One sample per (queue, name), in key order (engines upsert in that order, so two
    writers never wait on each other's rows in opposite orders)."""
    by_key: dict[tuple[str, str], Sample] = {}
    for s in samples:
        by_key[s.key] = by_key[s.key].plus(s) if s.key in by_key else s
    return [by_key[k] for k in sorted(by_key)]


@dataclass(frozen=True, slots=True, kw_only=True)
class Bucket:
    """One stored bucket of one (queue, name), as an engine answers it."""

    queue: str
    name: str
    start: datetime
    step: int
    done: int = 0
    failed: int = 0
    retried: int = 0
    cancelled: int = 0
    wait: tuple[int, ...] = ()
    run: tuple[int, ...] = ()
    depth: int | None = None


@dataclass(slots=True, kw_only=True)
class Point:
    """One point of a chart: the buckets of every selected (queue, name) at ``start``."""

    start: datetime
    done: int = 0
    failed: int = 0
    retried: int = 0
    cancelled: int = 0
    wait: tuple[int, ...] = ()
    run: tuple[int, ...] = ()
    depth: int | None = None
    depths: dict[str, int] = field(default_factory=dict)  # queue → its depth sample

    def take(self, b: Bucket) -> None:
        self.done += b.done
        self.failed += b.failed
        self.retried += b.retried
        self.cancelled += b.cancelled
        self.wait = add(self.wait, b.wait)
        self.run = add(self.run, b.run)
        if b.depth is not None:
            self.depths[b.queue] = b.depth
            self.depth = sum(self.depths.values())

    def wait_p(self, q: float) -> float | None:
        return percentile(self.wait, q)

    def run_p(self, q: float) -> float | None:
        return percentile(self.run, q)


def series(buckets: Iterable[Bucket], resolution: Resolution, end: datetime) -> list[Point]:
    """The chart's points, oldest first: one per step of ``resolution`` up to the bucket
    holding ``end``, each the sum of the buckets that start there (none: an empty point)."""
    last = floor(end, resolution.step)
    first = last - timedelta(seconds=resolution.step * (resolution.points - 1))
    points = {
        first + timedelta(seconds=resolution.step * i): None for i in range(resolution.points)
    }
    out = {start: Point(start=start) for start in points}
    for b in buckets:
        point = out.get(b.start.astimezone(UTC))
        if point is not None:
            point.take(b)
    return [out[s] for s in sorted(out)]


def since(resolution: Resolution, end: datetime) -> datetime:
    """The start of the oldest bucket a chart of ``resolution`` ending at ``end`` reads."""
    return floor(end, resolution.step) - timedelta(
        seconds=resolution.step * (resolution.points - 1)
    )
