"""Flows for the flow chaos test (tests/processes/test_flow_chaos.py), run by worker subprocesses.

Every page and every ``collect`` records its run the way ``jobs.effect`` does: in one
transaction, fenced by the lease token, it stores a ``SideEffect`` under the job's id, or a
``Redelivery`` if an earlier run (killed before its ack) already stored it. The fence also
refuses a run whose job has a cancel request, so an effect can only be stored before a
cascade reached the job: the test compares the two times.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django.db import IntegrityError, transaction

from django_blamequeue import Child, Unrecoverable, current_job, flow, job
from django_blamequeue.models import Job

from .models import Redelivery, SideEffect

PARENTS = "procflow"
PAGES = "procflow-pages"


class Stopped(Exception):
    """The run lost its lease or its job was cancelled: it must not store an effect."""


def record_run() -> None:
    ctx = current_job()
    db: str = ctx.backend.db  # type: ignore[attr-defined]
    with transaction.atomic(using=db):
        held = list(
            Job.objects.using(db)
            .select_for_update()
            .filter(id=ctx.job_id, lease_token=ctx.token, state="inflight", cancel_requested=False)
            .values_list("id", flat=True)
        )
        if not held:
            raise Stopped(f"job {ctx.job_id}: lease lost or cancel requested")
        try:
            with transaction.atomic(using=db):
                SideEffect.objects.using(db).create(
                    job_id=ctx.job_id,
                    pid=os.getpid(),
                    token=ctx.token,
                    attempt=ctx.attempt,
                    host_clock=time.time(),
                )
        except IntegrityError:
            first = SideEffect.objects.using(db).get(job_id=ctx.job_id)
            Redelivery.objects.using(db).create(
                job_id=ctx.job_id,
                pid=os.getpid(),
                token=ctx.token,
                first_pid=first.pid,
                first_token=first.token,
            )


@job(queue=PAGES, name="procflow.page", max_attempts=100)
def page(payload: dict[str, Any]) -> dict[str, int]:
    """Works for ``ms`` in 10 ms naps (an interrupt lands between two), then records its run."""
    until = time.monotonic() + payload["ms"] / 1000
    while time.monotonic() < until:
        time.sleep(0.01)
    record_run()
    if payload.get("fail"):
        raise Unrecoverable(f"page {payload['i']} is broken")
    return {"i": payload["i"]}


def summary(state: Any) -> dict[str, Any]:
    record_run()
    return {
        "completed": state.completed,
        "failed": state.failed,
        "cancelled": state.cancelled,
        "pending": state.pending,
        "results": dict(state.results),
    }


def pages(payload: dict[str, Any]) -> list[Child]:
    return [
        Child(page, {"i": i, "ms": ms, "fail": i in payload["fail"]}, key=f"p{i}")
        for i, ms in enumerate(payload["ms"])
    ]


@flow(queue=PARENTS, on_child_failure="fail", name="procflow.FailFast", max_attempts=100)
class FailFast:
    def fan_out(self, payload: dict[str, Any]) -> list[Child]:
        return pages(payload)

    def collect(self, payload: dict[str, Any], state: Any) -> dict[str, Any]:
        return summary(state)


@flow(queue=PARENTS, on_child_failure="continue", name="procflow.Continue", max_attempts=100)
class Continue:
    def fan_out(self, payload: dict[str, Any]) -> list[Child]:
        return pages(payload)

    def collect(self, payload: dict[str, Any], state: Any) -> dict[str, Any]:
        return summary(state)


@flow(queue=PARENTS, on_child_failure="continue", name="procflow.Nested", max_attempts=100)
class Nested:
    """A flow of ``FailFast`` flows."""

    def fan_out(self, payload: dict[str, Any]) -> list[Child]:
        return [Child(FailFast, chunk, key=f"c{i}") for i, chunk in enumerate(payload["chunks"])]

    def collect(self, payload: dict[str, Any], state: Any) -> dict[str, Any]:
        return summary(state)
