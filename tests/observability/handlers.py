"""Jobs of the observability tests."""

from __future__ import annotations

import time
from typing import Any

from django_blamequeue import job


@job(queue="obs", name="tests.observability.ok")
def ok(payload: Any) -> Any:
    return payload


@job(queue="obs", name="tests.observability.boom", max_attempts=2)
def boom(payload: Any) -> None:
    raise ValueError("boom")


@job(queue="obs", name="tests.observability.slow", max_attempts=1, timeout=0.2)
def slow(payload: Any) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.01)


@job(queue="obs", name="tests.observability.parent")
def parent(payload: Any) -> str:
    return ok.enqueue({"from": "parent"}, backend=payload["backend"]).job_id
