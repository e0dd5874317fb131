"""The benchmark's jobs: a no-op, so the numbers measure the queue and nothing else, and a
short sleep, for the measurements where jobs must hold their slots a while (shares)."""

from __future__ import annotations

import time
from typing import Any

from django_blamequeue import job

QUEUE = "bench"
NOOP = "bench.noop"
SLEEP = "bench.sleep"
STAMPED = "bench.stamped"


@job(queue=QUEUE, name=NOOP, max_attempts=3)
def noop(payload: Any) -> None:
    return None


@job(queue=QUEUE, name=SLEEP, max_attempts=3)
def sleep(seconds: float) -> None:
    time.sleep(seconds)


@job(queue=QUEUE, name=STAMPED, max_attempts=3)
def stamped(payload: Any) -> None:
    """The paced latency benchmark's job (``bench/latency.py``): report its start."""
    from bench.peerapps.probe import started

    started(payload["t"], payload["p"])
