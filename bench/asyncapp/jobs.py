"""``bench/async_jobs.py``: a job that awaits (a stand-in for an HTTP call or any I/O wait)."""

from __future__ import annotations

import asyncio
from typing import Any

from django_blamequeue import job

QUEUE = "asyncbench"


@job(queue=QUEUE, name="bench.asyncapp.nap")
async def nap(payload: dict[str, Any]) -> None:
    await asyncio.sleep(float(payload["seconds"]))
