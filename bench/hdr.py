"""A latency histogram of bounded memory with a fixed relative error (HDR-style), stdlib only.

``bench/latency.py`` records millions of enqueue→start samples over a 5-minute phase; keeping
them in a list would grow without bound. Here a value lands in a bucket of a log-linear scale:
every power of two above ``lowest`` is cut into ``2**sub_bits`` equal buckets, so a bucket's
width is at most ``1 / 2**sub_bits`` of its lower edge. A percentile is answered as the
midpoint of its bucket, within ``error`` (the half-width: 1/256 ≈ 0.4 % with the default 7
sub-bucket bits) of the true sample at that rank; values below ``lowest`` count in one bucket
answered as ``lowest / 2``. Memory is one ``dict`` entry per bucket in use: at most
``2**sub_bits`` per power of two between the smallest and the largest value (≈ 3,500 for
1 µs .. 100 s), whatever the count. It imports only the standard library: the peers' workers
and driver (another virtualenv) use it too.
"""

from __future__ import annotations

import math
from typing import Any


class Histogram:
    """Counts of values (any unit; the benchmark uses milliseconds) in log-linear buckets."""

    def __init__(self, lowest: float = 0.001, sub_bits: int = 7) -> None:
        self.lowest = lowest
        self.sub = 1 << sub_bits
        #: The largest relative distance of an answered percentile from the sample it stands for.
        self.error = 1 / (2 * self.sub)
        self.counts: dict[int, int] = {}
        self.total = 0
        self.max = 0.0
        self.min = math.inf

    def _bucket(self, value: float) -> int:
        if value < self.lowest:
            return -1
        mantissa, exponent = math.frexp(value / self.lowest)  # value/lowest = m·2**e, m in [.5,1)
        return (exponent - 1) * self.sub + int((2 * mantissa - 1) * self.sub)

    def _middle(self, bucket: int) -> float:
        if bucket < 0:
            return self.lowest / 2
        exponent, step = divmod(bucket, self.sub)
        return self.lowest * 2.0**exponent * (1 + (step + 0.5) / self.sub)

    def record(self, value: float, count: int = 1) -> None:
        b = self._bucket(value)
        self.counts[b] = self.counts.get(b, 0) + count
        self.total += count
        self.max = max(self.max, value)
        self.min = min(self.min, value)

    def merge(self, other: Histogram) -> None:
        """Add ``other``'s counts (same ``lowest`` and ``sub_bits``)."""
        for b, n in other.counts.items():
            self.counts[b] = self.counts.get(b, 0) + n
        self.total += other.total
        self.max = max(self.max, other.max)
        self.min = min(self.min, other.min)

    def percentile(self, q: float) -> float:
        """The value at ``q`` (0–100): the sample of rank ``ceil(q/100 · total)`` (at least
        the first), answered as its bucket's midpoint; the exact maximum at 100."""
        if not self.total:
            return math.nan
        if q >= 100:
            return self.max
        rank = max(1, math.ceil(q / 100 * self.total))
        seen = 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= rank:
                return min(self._middle(b), self.max)
        return self.max

    def summary(self) -> dict[str, float]:
        """count, p50, p95, p99, max (the benchmark's row)."""
        return {
            "count": self.total,
            "p50": self.percentile(50),
            "p95": self.percentile(95),
            "p99": self.percentile(99),
            "max": self.max if self.total else math.nan,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "lowest": self.lowest,
            "sub_bits": self.sub.bit_length() - 1,
            "counts": {str(b): n for b, n in sorted(self.counts.items())},
            "total": self.total,
            "min": self.min if self.total else None,
            "max": self.max,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Histogram:
        h = cls(data["lowest"], data["sub_bits"])
        h.counts = {int(b): n for b, n in data["counts"].items()}
        h.total, h.max = data["total"], data["max"]
        h.min = math.inf if data["min"] is None else data["min"]
        return h
