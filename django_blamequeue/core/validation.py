"""Argument checks for the public API: bad input is refused before anything is written.

The bounds are what every engine can store and read back: integers fit PostgreSQL's
``integer`` (32-bit), times stay within ``MAX_SECONDS`` (100 years) of now — Python's
``datetime`` ends in year 9999 (SQLite rows, psycopg's reads) and the redis backend keeps
times as microseconds in Lua doubles, exact until about 2255 — and text holds no NUL, which
PostgreSQL refuses in every text column, nor a lone surrogate, which UTF-8 cannot encode.
docs/design.md ("Limits") lists them for users.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django_blamequeue.core.controls import QueueLimits
from django_blamequeue.exceptions import ErrorCode, QueueError

MAX_QUEUE = 200
MAX_KEY = 255
#: The largest int any stored integer argument may be (PostgreSQL ``integer``).
MAX_INT = 2**31 - 1
#: The longest time argument (delay, lease, poll, rate-limit window, schedule interval):
#: 100 years of 365.25 days.
MAX_SECONDS = 3_155_760_000
#: The earliest ``run_at`` (anything earlier means "now" anyway).
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
#: Handler threads one consumer may start.
MAX_CONCURRENCY = 1000
#: The shortest schedule interval (timedeltas count microseconds). One shorter than
#: ``SWEEP_INTERVAL`` fires once per sweep: missed fires coalesce.
MIN_INTERVAL = 0.001
#: The deepest nesting of a JSON payload or schedule payload: a reader decodes it whatever
#: its own stack depth (Python's parser recurses per level, up to ~1,000 from the top).
MAX_JSON_DEPTH = 100
#: The most jobs one ``enqueue_many`` stores: all or none means one transaction, which holds
#: every job (its payload encoded, its row built) in memory at once: about 2 KB a small job,
#: so 100,000 is some 200 MB at most. Larger batches are split by the caller (each call all
#: or none); the payloads past the bound are never read.
MAX_ENQUEUE_MANY = 100_000
#: How much of a refused value a message quotes.
SHOWN = 60


def shown(value: object) -> str:
    """``repr(value)``, cut to ``SHOWN`` characters: a message never echoes megabytes."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= SHOWN else f"{text[: SHOWN - 1]}…"


def _number(value: object) -> float | None:
    """``value`` as a float if it is a finite int or float (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int past the float range
        return None
    return number if math.isfinite(number) else None


def storable(text: str) -> bool:
    """Text every engine stores: no NUL (PostgreSQL refuses it in text) and no lone surrogate
    (UTF-8 has no encoding for one; only Python strings can hold them)."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def queue_name(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise QueueError(
            ErrorCode.MISSING_QUEUE, f"a queue name must be a non-empty string, not {shown(value)}"
        )
    if len(value) > MAX_QUEUE:
        raise QueueError(ErrorCode.MISSING_QUEUE, f"queue name longer than {MAX_QUEUE} characters")
    if not storable(value):
        raise QueueError(
            ErrorCode.MISSING_QUEUE, "a queue name cannot contain NUL or a lone surrogate"
        )
    return value


def identifier(value: object, what: str = "job_id") -> str:
    """A job or flow id argument: never None, empty or NUL, so no verb reads "any id" into it.

    Any other string is a fair question; one that names no job is answered as unknown.
    """
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > MAX_KEY
        or not storable(value)
    ):
        raise QueueError(
            ErrorCode.BAD_ARGUMENT,
            f"{what} must be a non-empty string of ≤{MAX_KEY} characters without NUL or a "
            f"lone surrogate, not {shown(value)}",
        )
    return value


def positive_int(value: object, what: str, limit: int = MAX_INT) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= limit:
        return value
    raise QueueError(
        ErrorCode.BAD_ARGUMENT, f"{what} must be an int from 1 to {limit:,}, not {shown(value)}"
    )


def non_negative_int(value: object, what: str, limit: int = MAX_INT) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= limit:
        return value
    raise QueueError(
        ErrorCode.BAD_ARGUMENT, f"{what} must be an int from 0 to {limit:,}, not {shown(value)}"
    )


def concurrency(value: object) -> int:
    """Handler slots of one consumer: each is a thread, so there is a ceiling."""
    return positive_int(value, "concurrency", MAX_CONCURRENCY)


def seconds(
    value: object, what: str, *, minimum: float = 0.0, default: float | None = None
) -> float:
    """A finite number of seconds above ``minimum`` and at most ``MAX_SECONDS``; None is
    ``default`` where there is one (0 is refused, never read as "the default")."""
    number = _number(default if value is None else value)
    if number is None or not minimum < number <= MAX_SECONDS:
        raise QueueError(
            ErrorCode.BAD_ARGUMENT,
            f"{what} must be seconds > {minimum:g} and ≤ {MAX_SECONDS:,}, not {shown(value)}",
        )
    return number


def positive_number(value: object, what: str) -> float:
    return seconds(value, what)


def priority(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and -MAX_INT <= value <= MAX_INT:
        return value
    raise QueueError(
        ErrorCode.BAD_ARGUMENT, f"priority must be an int within ±{MAX_INT:,}, not {shown(value)}"
    )


def delay(value: object) -> float | None:
    if value is None:
        return None
    number = _number(value.total_seconds() if isinstance(value, timedelta) else value)
    if number is None or not 0 <= number <= MAX_SECONDS:
        raise QueueError(
            ErrorCode.BAD_ARGUMENT,
            f"delay must be seconds from 0 to {MAX_SECONDS:,} (100 years), not {shown(value)}",
        )
    return number or None


def run_at(value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise QueueError(ErrorCode.BAD_ARGUMENT, "run_at must be a timezone-aware datetime")
    latest = datetime.now(UTC) + timedelta(seconds=MAX_SECONDS)
    try:
        inside = EARLIEST <= value <= latest
    except OverflowError:  # e.g. datetime.min in a zone east of UTC
        inside = False
    if not inside:
        raise QueueError(
            ErrorCode.BAD_ARGUMENT,
            f"run_at must be between {EARLIEST:%Y-%m-%d} and 100 years from now, not {value!r}",
        )
    # The same instant in UTC: PostgreSQL refuses offsets past ±15:59, Python has up to ±23:59.
    return value.astimezone(UTC)


def created_before(value: object) -> datetime | None:
    """A purge's bound: an aware datetime, in UTC."""
    if value is None:
        return None
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise QueueError(ErrorCode.BAD_ARGUMENT, "created_before must be a timezone-aware datetime")
    return value.astimezone(UTC)


def expires(value: object) -> float | datetime | None:
    """When a job not started by then is cancelled instead (reason ``expired``): seconds
    after the enqueue (a ``timedelta`` too), or an aware datetime, answered in UTC."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            raise QueueError(ErrorCode.BAD_ARGUMENT, "expires must be a timezone-aware datetime")
        try:
            inside = EARLIEST <= value <= datetime.now(UTC) + timedelta(seconds=MAX_SECONDS)
        except OverflowError:
            inside = False
        if not inside:
            raise QueueError(
                ErrorCode.BAD_ARGUMENT,
                f"expires must be between {EARLIEST:%Y-%m-%d} and 100 years from now, "
                f"not {value!r}",
            )
        return value.astimezone(UTC)
    number = _number(value.total_seconds() if isinstance(value, timedelta) else value)
    if number is None or not 0 < number <= MAX_SECONDS:
        raise QueueError(
            ErrorCode.BAD_ARGUMENT,
            "expires must be seconds > 0 and ≤ "
            f"{MAX_SECONDS:,} (a timedelta too) or an aware datetime, not {shown(value)}",
        )
    return number


#: ``@job(rate_limit="10/m")``: the windows a unit names, in seconds (Celery's spelling).
RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def job_rate_limit(value: object) -> tuple[int, float] | None:
    """A job name's rate limit: ``"10/s"``, ``"10/m"``, ``"10/h"`` (Celery's spelling), an
    int (per second, as Celery reads one) or ``(max, per_seconds)``; ``BAD_RATE_LIMIT``
    otherwise. Answered as ``(max, per_seconds)``."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return rate_limit((value, 1.0))
    if isinstance(value, str):
        count, slash, unit = value.strip().partition("/")
        per = RATE_UNITS.get(unit.strip().lower()[:1]) if slash and unit.strip() else None
        if per is None or unit.strip().lower() not in {*RATE_UNITS, "sec", "min", "hour"}:
            raise QueueError(
                ErrorCode.BAD_RATE_LIMIT,
                f"rate_limit must be like '10/s', '10/m' or '10/h', not {shown(value)}",
            )
        if not count.strip().isdigit():
            raise QueueError(
                ErrorCode.BAD_RATE_LIMIT,
                f"rate_limit must start with a whole number of starts, not {shown(value)}",
            )
        return rate_limit((int(count), per))
    return rate_limit(value)


def optional_text(value: object, what: str, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > limit or not storable(value):
        raise QueueError(
            ErrorCode.BAD_ARGUMENT,
            f"{what} must be a non-empty string of ≤{limit} characters without NUL or a "
            "lone surrogate",
        )
    return value


def interval(value: object) -> float:
    """A schedule's interval: seconds from ``MIN_INTERVAL`` to ``MAX_SECONDS``."""
    number = _number(value)
    if number is None or not MIN_INTERVAL <= number <= MAX_SECONDS:
        raise QueueError(
            ErrorCode.BAD_ARGUMENT,
            f"interval must be seconds from {MIN_INTERVAL:g} to {MAX_SECONDS:,} (100 years), "
            f"not {shown(value)}",
        )
    return number


def deeper_than(value: object, limit: int) -> bool:
    """Whether lists, tuples and dicts in ``value`` nest more than ``limit`` levels. Walks
    without recursion, so a hostile depth costs no stack."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list | tuple):
            if depth == limit:
                return True
            stack.extend((inner, depth + 1) for inner in item)
    return False


def json_problem(value: object) -> str | None:
    """Why ``value`` cannot be stored as a JSON document every engine reads back (None if it
    can): NaN and ±Infinity are not JSON, PostgreSQL's ``jsonb`` refuses NUL in strings, and
    nesting is capped at ``MAX_JSON_DEPTH``. Walks without recursion, so depth costs no stack.
    """
    if deeper_than(value, MAX_JSON_DEPTH):
        return f"is nested deeper than {MAX_JSON_DEPTH} levels"
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"holds {item!r}, which JSON has no number for"
        if isinstance(item, str) and not storable(item):
            return "holds a string with NUL or a lone surrogate, which PostgreSQL cannot store"
        if isinstance(item, dict):
            if not all(storable(k) for k in item if isinstance(k, str)):
                return "holds a key with NUL or a lone surrogate, which PostgreSQL cannot store"
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return None


def rate_limit(value: Any) -> tuple[int, float] | None:
    """``(max, per_seconds)``: a positive int and a positive finite number."""
    if value is None:
        return None
    try:
        limit, per = value
    except (TypeError, ValueError):
        raise QueueError(
            ErrorCode.BAD_RATE_LIMIT, f"rate_limit must be (max, per_seconds), not {shown(value)}"
        ) from None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_INT:
        raise QueueError(
            ErrorCode.BAD_RATE_LIMIT,
            f"rate_limit max must be an int from 1 to {MAX_INT:,}, not {shown(limit)}",
        )
    window = _number(per)
    if window is None or not 0 < window <= MAX_SECONDS:
        raise QueueError(
            ErrorCode.BAD_RATE_LIMIT,
            f"rate_limit seconds must be > 0 and ≤ {MAX_SECONDS:,}, not {shown(per)}",
        )
    return limit, window


def parse_rate_limit(text: str) -> tuple[int, float]:
    """``"MAX/SECONDS"`` as ``runworker --rate-limit`` takes it."""
    try:
        left, right = text.split("/", 1)
        parsed = rate_limit((int(left), float(right)))
    except QueueError:
        raise
    except ValueError:
        raise QueueError(
            ErrorCode.BAD_RATE_LIMIT, f"expected MAX/SECONDS, not {shown(text)}"
        ) from None
    assert parsed is not None
    return parsed


def concurrency_key(value: object) -> str | None:
    """A job's concurrency key: None, or non-empty storable text of at most 255 characters
    ("" is the queue's own rate window)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise QueueError(
            ErrorCode.BAD_ARGUMENT,
            f"concurrency_key must be a non-empty string or None, not {shown(value)}",
        )
    return optional_text(value, "concurrency_key", MAX_KEY)


def _limit_count(value: object, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT:
        raise QueueError(
            ErrorCode.BAD_LIMIT,
            f"{what} must be None or an int from 1 to {MAX_INT:,}, not {shown(value)}",
        )
    return value


def _limit_rate(value: object, what: str) -> tuple[int, float] | None:
    if value is None:
        return None
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise QueueError(
            ErrorCode.BAD_LIMIT, f"{what} must be None or (max, per_seconds), not {shown(value)}"
        )
    most, per = value
    if isinstance(most, bool) or not isinstance(most, int) or not 1 <= most <= MAX_INT:
        raise QueueError(
            ErrorCode.BAD_LIMIT,
            f"{what} max must be an int from 1 to {MAX_INT:,}, not {shown(most)}",
        )
    window = _number(per)
    if window is None or not 0 < window <= MAX_SECONDS:
        raise QueueError(
            ErrorCode.BAD_LIMIT,
            f"{what} seconds must be > 0 and ≤ {MAX_SECONDS:,}, not {shown(per)}",
        )
    return most, window


#: Bounds of ``key_weights``: a weight is an int from 1 to MAX_WEIGHT; at most MAX_PATTERNS
#: patterns of at most MAX_PATTERN characters (a concurrency key's own bound).
MAX_WEIGHT = 1000
MAX_PATTERNS = 100
MAX_PATTERN = 255


def key_weight_pairs(value: object) -> tuple[tuple[str, int], ...]:
    """``key_weights`` as ``(pattern, weight)`` pairs in the order given (the first pattern a
    key matches gives its weight): a dict or pairs of non-empty glob → int from 1 to 1,000;
    anything else is ``BAD_KEY_WEIGHT``."""
    if value is None:
        return ()
    if isinstance(value, Mapping):
        pairs: list[object] = list(value.items())
    elif isinstance(value, list | tuple):
        pairs = list(value)
    else:
        raise QueueError(
            ErrorCode.BAD_KEY_WEIGHT,
            f"key_weights must be a dict of pattern → weight, not {shown(value)}",
        )
    if len(pairs) > MAX_PATTERNS:
        raise QueueError(
            ErrorCode.BAD_KEY_WEIGHT, f"key_weights has more than {MAX_PATTERNS} patterns"
        )
    out: list[tuple[str, int]] = []
    for pair in pairs:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise QueueError(
                ErrorCode.BAD_KEY_WEIGHT, f"a key weight is (pattern, weight), not {shown(pair)}"
            )
        pattern, weight = pair
        if (
            not isinstance(pattern, str)
            or not pattern
            or len(pattern) > MAX_PATTERN
            or not storable(pattern)
        ):
            raise QueueError(
                ErrorCode.BAD_KEY_WEIGHT,
                f"a key pattern must be a non-empty str of at most {MAX_PATTERN} characters "
                f"without NUL or a lone surrogate, not {shown(pattern)}",
            )
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= MAX_WEIGHT:
            raise QueueError(
                ErrorCode.BAD_KEY_WEIGHT,
                f"the weight of {pattern!r} must be an int from 1 to {MAX_WEIGHT:,}, "
                f"not {shown(weight)}",
            )
        if any(p == pattern for p, _ in out):
            raise QueueError(ErrorCode.BAD_KEY_WEIGHT, f"key pattern {pattern!r} given twice")
        out.append((pattern, weight))
    return tuple(out)


def parse_key_weight(text: str) -> tuple[str, int]:
    """``"PATTERN=WEIGHT"`` for the ``limits`` command; ``BAD_KEY_WEIGHT`` otherwise."""
    pattern, sep, weight = text.rpartition("=")
    try:
        parsed = key_weight_pairs([(pattern, int(weight))]) if sep else None
    except ValueError:
        parsed = None
    if not parsed:
        raise QueueError(ErrorCode.BAD_KEY_WEIGHT, f"expected PATTERN=WEIGHT, not {shown(text)}")
    return parsed[0]


def limits(
    *,
    concurrency: object = None,
    key_concurrency: object = None,
    rate_limit: object = None,
    key_rate_limit: object = None,
    key_weights: object = None,
) -> QueueLimits:
    """``QueueLimits`` from ``set_limits``' arguments (or a ``QUEUES`` entry): counts are
    None or an int from 1 to 2**31-1, rates None or ``(max, per_seconds)``; anything else is
    ``BAD_LIMIT`` (``BAD_KEY_WEIGHT`` for the weights)."""
    return QueueLimits(
        concurrency=_limit_count(concurrency, "concurrency"),
        key_concurrency=_limit_count(key_concurrency, "key_concurrency"),
        rate_limit=_limit_rate(rate_limit, "rate_limit"),
        key_rate_limit=_limit_rate(key_rate_limit, "key_rate_limit"),
        key_weights=key_weight_pairs(key_weights),
    )


def parse_limit_rate(text: str) -> tuple[int, float]:
    """``"MAX/SECONDS"`` for the ``limits`` command; ``BAD_LIMIT`` otherwise."""
    try:
        left, right = text.split("/", 1)
        parsed = _limit_rate((int(left), float(right)), "rate")
    except QueueError:
        raise
    except ValueError:
        raise QueueError(ErrorCode.BAD_LIMIT, f"expected MAX/SECONDS, not {shown(text)}") from None
    assert parsed is not None
    return parsed
