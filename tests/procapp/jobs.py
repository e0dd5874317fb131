"""Handlers for worker subprocesses (autodiscovered, as a project's ``jobs.py`` would be).

``effect`` is the idempotent consumer a job queue with at-least-once delivery asks for: in one
transaction it checks that it still holds the lease (the token fences a stale run out) and
stores the job's effect under the job's unique id. A run that finds the effect already there
is a re-delivery: it records whose effect it found and succeeds without doing the work again.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django.db import IntegrityError, transaction

from django_blamequeue import current_job, job
from django_blamequeue.models import Job

from .models import Redelivery, SideEffect

QUEUE = "proc"


class LeaseGone(Exception):
    """This run no longer holds the job's lease; another worker owns the effect now."""


@job(queue=QUEUE, name="procapp.effect")
def effect(payload: dict[str, Any] | None) -> dict[str, int]:
    seconds = float((payload or {}).get("sleep", 0))
    if seconds:
        time.sleep(seconds)
    ctx = current_job()
    db: str = ctx.backend.db  # type: ignore[attr-defined]
    with transaction.atomic(using=db):
        held = (
            Job.objects.using(db)
            .select_for_update()
            .filter(id=ctx.job_id, lease_token=ctx.token, state="inflight")
            .values_list("id", flat=True)
        )
        if not list(held):
            raise LeaseGone(f"job {ctx.job_id}: lease {ctx.token} is no longer ours")
        try:
            with transaction.atomic(using=db):
                SideEffect.objects.using(db).create(
                    job_id=ctx.job_id, pid=os.getpid(), token=ctx.token, attempt=ctx.attempt,
                    host_clock=time.time(),
                )  # fmt: skip
        except IntegrityError:
            first = SideEffect.objects.using(db).get(job_id=ctx.job_id)
            Redelivery.objects.using(db).create(
                job_id=ctx.job_id, pid=os.getpid(), token=ctx.token, first_pid=first.pid,
                first_token=first.token,
            )  # fmt: skip
    return {"pid": os.getpid()}
