"""Reading a claimed job's stored fields back one at a time, never failing the claim.

An engine may hand back a field of the wrong type: SQLite keeps whatever a hand-written
``INSERT`` put in a column, a Redis hash whatever an ``HSET`` wrote. Decoding such a job
inside the claim would fail the claim for every job of the batch, again at every claim: one
row would stall the queue. So each field is read on its own; one that cannot be read takes a
harmless default and is noted, and the claim answers the job with its ``problem`` so the
worker fails it alone as ``bad_job``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Any


class FieldReader:
    """Collects what was wrong with one stored job (``problem``)."""

    def __init__(self) -> None:
        self._problems: list[str] = []

    @property
    def problem(self) -> str | None:
        return "; ".join(self._problems) or None

    def _bad(self, field: str, value: Any, wanted: str) -> None:
        self._problems.append(f"the stored {field} is not {wanted}: {value!r:.60}")

    def text(self, field: str, value: Any) -> str | None:
        """A string, None for NULL / a Redis nil (False); anything else is noted."""
        if value is None or value is False:
            return None
        if isinstance(value, str):
            return value
        self._bad(field, value, "text")
        return None

    def integer(self, field: str, value: Any, default: int) -> int:
        """An int, or the text of one (Redis keeps numbers as strings)."""
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        self._bad(field, value, "an integer")
        return default

    def seconds(self, field: str, value: Any) -> float | None:
        """A positive finite number of seconds, None for none (NULL, nil, "")."""
        if value is None or value is False or value == "":
            return None
        try:
            number = float(value) if not isinstance(value, bool) else math.nan
        except (TypeError, ValueError):
            number = math.nan
        if 0 < number < 1e10:
            return number
        self._bad(field, value, "a number of seconds")
        return None

    def body(self, field: str, value: Any) -> bytes:
        """Bytes; text where bytes belong is taken as its UTF-8 (what was meant)."""
        if value is None:
            return b""
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value)
        if isinstance(value, str):
            return value.encode("utf-8", "surrogatepass")
        self._bad(field, value, "bytes")
        return b""

    def time(
        self,
        field: str,
        value: Any,
        convert: Callable[[Any], datetime | None],
        *,
        required: bool = False,
    ) -> Any:
        """``convert(value)`` (the engine's own reading of a time), None if it fails. A
        ``required`` time (a NOT NULL column) that reads as None is noted too: SQLite's own
        reading of a declared datetime column answers None for text that is no time."""
        try:
            when = convert(value)
        except (TypeError, ValueError, OverflowError, OSError):
            self._bad(field, value, "a time")
            return None
        if when is None and required:
            self._bad(field, value, "a time")
        return when
