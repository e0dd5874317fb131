"""Retry delay: ``min(base · 2^(attempt−1), max)``, optionally with full jitter."""

from __future__ import annotations

import random


def backoff_seconds(
    attempt: int, *, base: float = 1.0, maximum: float = 300.0, jitter: bool = False
) -> float:
    """Delay before the next try after ``attempt`` (1-based) failed."""
    if attempt < 1:
        attempt = 1
    exponent = min(attempt - 1, 62)  # 2**62 · base is past any sane max; avoids overflow
    delay = min(base * (2.0**exponent), maximum)
    if jitter:
        delay = random.uniform(0.0, delay)
    return delay
