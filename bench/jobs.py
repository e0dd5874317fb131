"""The benchmark's job: a no-op, so the numbers measure the queue and nothing else."""

from __future__ import annotations

from typing import Any

from django_blamequeue import job

QUEUE = "bench"
NOOP = "bench.noop"


@job(queue=QUEUE, name=NOOP, max_attempts=3)
def noop(payload: Any) -> None:
    return None
