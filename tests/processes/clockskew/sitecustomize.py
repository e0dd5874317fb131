"""Test-only hook: a process started with this directory on PYTHONPATH and
``BLAMEQUEUE_TEST_CLOCK_SKEW=SECONDS`` reads a wall clock that is SECONDS off.

Python runs ``sitecustomize`` before any other import, so every later ``from datetime import
datetime`` (Django's ``timezone.now()`` included) gets the skewed class, and ``time.time()``
(logging, anything else) is shifted too. Monotonic clocks, which only measure intervals, are
left alone. libfaketime would shift the C library's clocks instead, but 0.9.10 breaks either
``time.sleep`` or ``threading.Event.wait`` under Python 3.12.
"""

from __future__ import annotations

import datetime as _datetime
import os
import time as _time

SKEW = float(os.environ.get("BLAMEQUEUE_TEST_CLOCK_SKEW") or 0)

if SKEW:
    _time_time, _time_time_ns = _time.time, _time.time_ns
    _SHIFT = _datetime.timedelta(seconds=SKEW)

    def _skewed_time() -> float:
        return _time_time() + SKEW

    def _skewed_time_ns() -> int:
        return _time_time_ns() + int(SKEW * 1e9)

    class SkewedDatetime(_datetime.datetime):
        """``datetime`` whose clock readings are shifted; arithmetic keeps the subclass."""

        @classmethod
        def now(cls, tz: _datetime.tzinfo | None = None) -> SkewedDatetime:
            return super().now(tz) + _SHIFT

        @classmethod
        def utcnow(cls) -> SkewedDatetime:
            return super().utcnow() + _SHIFT

        @classmethod
        def today(cls) -> SkewedDatetime:
            return super().today() + _SHIFT

    _time.time, _time.time_ns = _skewed_time, _skewed_time_ns
    _datetime.datetime = SkewedDatetime  # type: ignore[misc]
