"""Handlers for worker subprocesses (autodiscovered, as a project's ``jobs.py`` would be).

``effect`` is the idempotent consumer a job queue with at-least-once delivery asks for: in one
transaction it checks that it still holds the lease (the token fences a stale run out) and
stores the job's effect under the job's unique id. A run that finds the effect already there
is a redelivery: it records whose effect it found and succeeds without doing the work again.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django.db import connections, transaction

from django_blamequeue import current_job, job

from .models import Redelivery, SideEffect

QUEUE = "proc"


class LeaseGone(Exception):
    """This run no longer holds the job's lease; another worker owns the effect now."""


# Raw SQL: two statements a run, so that the handler costs little next to the queue itself.
FENCE = "SELECT id FROM blamequeue_job WHERE id = %s AND lease_token = %s AND state = 'inflight'"
STORE = (
    "INSERT INTO procapp_sideeffect (job_id, pid, token, attempt, host_clock) "
    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (job_id) DO NOTHING RETURNING id"
)


@job(queue=QUEUE, name="procapp.effect")
def effect(payload: dict[str, Any] | None) -> dict[str, int]:
    """Store this job's effect once; ``{"sleep": s}`` works ``s`` seconds first."""
    seconds = float((payload or {}).get("sleep", 0))
    if seconds:
        time.sleep(seconds)
    ctx = current_job()
    db: str = ctx.backend.db  # type: ignore[attr-defined]
    connection = connections[db]
    fence = FENCE + (" FOR UPDATE" if connection.vendor == "postgresql" else "")
    # On SQLite the transaction is IMMEDIATE: it holds the write lock from the fence on.
    with transaction.atomic(using=db), connection.cursor() as cur:
        cur.execute(fence, [ctx.job_id, ctx.token])
        if cur.fetchone() is None:
            raise LeaseGone(f"job {ctx.job_id}: lease {ctx.token} is no longer ours")
        cur.execute(STORE, [ctx.job_id, os.getpid(), ctx.token, ctx.attempt, time.time()])
        if cur.fetchone() is None:
            first = SideEffect.objects.using(db).get(job_id=ctx.job_id)
            Redelivery.objects.using(db).create(
                job_id=ctx.job_id,
                pid=os.getpid(),
                token=ctx.token,
                first_pid=first.pid,
                first_token=first.token,
            )
    return {"pid": os.getpid()}
