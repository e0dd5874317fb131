"""The idempotent handler of the Redis process tests (tests/processes/test_redis_faults.py).

``jobs.effect`` fences its effect with the lease token inside the database transaction that
stores it; a Redis lease cannot join that transaction, so this one asks Redis whether the lease
is still held, then stores the effect under the job's unique id. The id is the real guard: a
stale run that slipped between the check and the insert finds the effect stored and records a
``Redelivery`` instead of doing the work twice.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django.db import connections, transaction

from django_blamequeue import current_job, job

from .jobs import QUEUE, STORE, LeaseGone
from .models import Redelivery, SideEffect

DB = "default"  # the redis backend's DATABASE in tests/settings.py


@job(queue=QUEUE, name="procapp.redis_effect")
def redis_effect(payload: dict[str, Any] | None) -> dict[str, int]:
    """Store this job's effect once; ``{"sleep": s}`` works ``s`` seconds first."""
    seconds = float((payload or {}).get("sleep", 0))
    if seconds:
        time.sleep(seconds)
    ctx = current_job()
    if ctx.backend.lease_signals([(ctx.job_id, ctx.token)]).lost:
        raise LeaseGone(f"job {ctx.job_id}: lease {ctx.token} is no longer ours")
    with transaction.atomic(using=DB), connections[DB].cursor() as cur:
        cur.execute(STORE, [ctx.job_id, os.getpid(), ctx.token, ctx.attempt, time.time()])
        if cur.fetchone() is None:
            first = SideEffect.objects.using(DB).get(job_id=ctx.job_id)
            Redelivery.objects.using(DB).create(
                job_id=ctx.job_id,
                pid=os.getpid(),
                token=ctx.token,
                first_pid=first.pid,
                first_token=first.token,
            )
    return {"pid": os.getpid()}
