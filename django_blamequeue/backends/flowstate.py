"""What ``collect`` sees, made from a parent's manifest rows: the same on every backend."""

from __future__ import annotations

from typing import Any

from django_blamequeue.core.records import FlowState
from django_blamequeue.serializers import decode


def state_from_rows(rows: list[dict[str, Any]]) -> FlowState:
    """``FlowState`` from the parent's dependency rows (status, key, result, error, and the
    child's ``job_id`` and ``backend`` where the engine has them)."""
    tally = {"done": 0, "failed": 0, "cancelled": 0, "pending": 0}
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    states: dict[str, str] = {}
    jobs: dict[str, tuple[str, str]] = {}
    for row in rows:
        if row.get("job_id") and row.get("backend"):
            jobs[row["key"]] = (row["job_id"], row["backend"])
        status = row["status"]
        tally[status if status in tally else "pending"] += 1
        states[row["key"]] = status
        if status == "done" and row["result"] is not None:
            results[row["key"]] = decode(
                row["result_type"] or "application/json", "utf-8", bytes(row["result"])
            )
        elif status == "done":
            results[row["key"]] = None
        if row["error"]:
            errors[row["key"]] = row["error"]
    return FlowState(
        completed=tally["done"],
        failed=tally["failed"],
        cancelled=tally["cancelled"],
        pending=tally["pending"],
        results=results,
        errors=errors,
        states=states,
        jobs=jobs,
    )
