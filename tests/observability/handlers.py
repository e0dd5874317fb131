"""Jobs of the observability tests."""

from __future__ import annotations

import time
from typing import Any

from django_blamequeue import Child, Unrecoverable, current_job, flow, job


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


@job(queue="obs", name="tests.observability.refuse", max_attempts=3)
def refuse(payload: Any) -> None:
    raise Unrecoverable("refused")


@job(queue="obs", name="tests.observability.until_cancelled", max_attempts=1)
def until_cancelled(payload: Any) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not current_job().cancelled:
        time.sleep(0.01)


@flow(queue="obs", name="tests.observability.report", on_child_failure="fail")
class Report:
    """Two good pages, one refused, one that runs until the fail-fast settle cancels it."""

    def fan_out(self, payload: Any) -> list[Child]:
        return [
            Child(ok, {"page": 1}, key="p1"),
            Child(ok, {"page": 2}, key="p2"),
            Child(until_cancelled, {}, key="slow"),
            Child(refuse, {}, key="bad"),
        ]

    def collect(self, payload: Any, state: Any) -> dict[str, int]:
        return {"failed": state.failed, "cancelled": state.cancelled}


@job(queue="obs", name="tests.observability.fetch")
async def fetch(payload: Any) -> Any:
    import asyncio

    await asyncio.sleep(0)
    return payload


@job(queue="obs", name="tests.observability.async_slow", max_attempts=1, timeout=0.2)
async def async_slow(payload: Any) -> None:
    import asyncio

    await asyncio.sleep(30)
