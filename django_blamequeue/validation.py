"""Argument checks for the public API: bad input is refused before anything is written."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from .exceptions import ErrorCode, QueueError

MAX_QUEUE = 200
MAX_KEY = 255


def queue_name(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise QueueError(
            ErrorCode.MISSING_QUEUE, f"a queue name must be a non-empty string, not {value!r}"
        )
    if len(value) > MAX_QUEUE:
        raise QueueError(ErrorCode.MISSING_QUEUE, f"queue name longer than {MAX_QUEUE} characters")
    return value


def positive_int(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise QueueError(ErrorCode.BAD_ARGUMENT, f"{what} must be a positive int, not {value!r}")
    return value


def non_negative_int(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise QueueError(ErrorCode.BAD_ARGUMENT, f"{what} must be an int ≥ 0, not {value!r}")
    return value


def positive_number(value: object, what: str) -> float:
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise QueueError(ErrorCode.BAD_ARGUMENT, f"{what} must be a positive number, not {value!r}")
    return float(value)


def priority(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) > 2**31 - 1:
        raise QueueError(ErrorCode.BAD_ARGUMENT, f"priority must be an int, not {value!r}")
    return value


def delay(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value < 0
    ):
        raise QueueError(ErrorCode.BAD_ARGUMENT, f"delay must be seconds ≥ 0, not {value!r}")
    return float(value) or None


def run_at(value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise QueueError(ErrorCode.BAD_ARGUMENT, "run_at must be a timezone-aware datetime")
    return value


def optional_text(value: object, what: str, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > limit:
        raise QueueError(
            ErrorCode.BAD_ARGUMENT, f"{what} must be a non-empty string of ≤{limit} characters"
        )
    return value


def rate_limit(value: Any) -> tuple[int, float] | None:
    """``(max, per_seconds)``: a positive int and a positive finite number."""
    if value is None:
        return None
    try:
        limit, per = value
    except (TypeError, ValueError):
        raise QueueError(
            ErrorCode.BAD_RATE_LIMIT, f"rate_limit must be (max, per_seconds), not {value!r}"
        ) from None
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise QueueError(
            ErrorCode.BAD_RATE_LIMIT, f"rate_limit max must be a positive int, not {limit!r}"
        )
    if (
        not isinstance(per, int | float)
        or isinstance(per, bool)
        or not math.isfinite(per)
        or per <= 0
    ):
        raise QueueError(
            ErrorCode.BAD_RATE_LIMIT,
            f"rate_limit seconds must be a positive finite number, not {per!r}",
        )
    return limit, float(per)


def parse_rate_limit(text: str) -> tuple[int, float]:
    """``"MAX/SECONDS"`` as ``runworker --rate-limit`` takes it."""
    try:
        left, right = text.split("/", 1)
        parsed = rate_limit((int(left), float(right)))
    except QueueError:
        raise
    except ValueError:
        raise QueueError(ErrorCode.BAD_RATE_LIMIT, f"expected MAX/SECONDS, not {text!r}") from None
    assert parsed is not None
    return parsed
