"""Jobs of the demo project (imported by django_blamequeue's autodiscovery)."""

from __future__ import annotations

import random
import time
from typing import Any

from django_blamequeue import Unrecoverable, current_job, job


@job(queue="emails", max_attempts=3)
def send_email(payload: dict[str, Any]) -> dict[str, Any]:
    """Pretend to send an email (a few milliseconds of work)."""
    time.sleep(random.uniform(0.001, 0.004))
    return {"sent": True, "to": payload["to"]}


@job(queue="emails", max_attempts=3)
def flaky_webhook(payload: dict[str, Any]) -> None:
    """Always fails: retries with backoff, then lands in the dead-letter queue."""
    raise ConnectionError(f"webhook {payload['url']} refused the connection")


@job(queue="reports", timeout=30)
def render_report(payload: dict[str, Any]) -> dict[str, Any]:
    """A step that shows progress."""
    ctx = current_job()
    for pct in (25, 50, 75, 100):
        time.sleep(0.02)
        ctx.progress(pct)
    return {"step": payload["step"], "rows": 100 * len(payload["step"])}


@job(queue="reports")
def reject(payload: dict[str, Any]) -> None:
    raise Unrecoverable("bad input: no retry will fix it")
