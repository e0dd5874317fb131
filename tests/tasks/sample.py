"""Module-level ``@task`` functions for the django.tasks tests (and their worker subprocesses)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.tasks import task

from django_blamequeue import current_job

B = "blamequeue"


class PaymentError(Exception):
    pass


@task(backend=B, queue_name="tasks")
def add(a: int, b: int) -> int:
    return a + b


@task(backend=B, queue_name="tasks")
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@task(backend=B, queue_name="tasks", max_attempts=1)
def decline(amount: int) -> None:
    raise PaymentError(f"declined {amount}")


@task(backend=B, queue_name="tasks", max_attempts=2)
def always_fails() -> None:
    raise ValueError("always")


@task(backend=B, queue_name="tasks", max_attempts=3)
def flaky() -> str:
    if current_job().attempt < 2:
        raise RuntimeError("first attempt fails")
    return "second attempt"


@task(backend=B, queue_name="tasks", takes_context=True)
def with_context(context: Any, x: int) -> dict[str, Any]:
    return {"attempt": context.attempt, "id": context.task_result.id, "x": x}


@task(backend=B, queue_name="tasks")
async def async_add(a: int, b: int) -> int:
    return a + b


@task(backend=B, queue_name="tasks", max_attempts=1, timeout=0.3)
def too_slow() -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.01)


@task(backend=B, queue_name="tasks", max_attempts=4, timeout=12.5, dedupe_key="nightly")
def nightly() -> str:
    return "ran"


@task(backend=B, queue_name="tasks")
def returns_object() -> object:
    return object()


@task(backend=B, queue_name="crash", max_attempts=3)
def crash_once(marker_dir: str) -> int:
    """Attempt 1 writes a marker and hangs (the test SIGKILLs its worker); later ones return."""
    attempt = current_job().attempt
    (Path(marker_dir) / f"attempt-{attempt}").write_text("started")
    if attempt == 1:
        time.sleep(600)
    return attempt


def plain_function() -> None:
    """Not a task: used for 'a job that is not a task run'."""


@task(backend=B, queue_name="tasks", max_attempts=1)
def exits() -> None:
    raise SystemExit("This Task failed due to SystemExit")


@task(backend=B, queue_name="tasks", takes_context=True)
def own_id(context: Any) -> str:
    return str(context.task_result.id)


@task(backend=B, queue_name="tasks")
def noop() -> None:
    return None
