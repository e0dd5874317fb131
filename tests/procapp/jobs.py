"""Handlers for worker subprocesses (autodiscovered, as a project's ``jobs.py`` would be).

``effect`` is the idempotent consumer a job queue with at-least-once delivery asks for: in one
transaction it checks that it still holds the lease (the token fences a stale run out) and
stores the job's effect under the job's unique id. A run that finds the effect already there
is a redelivery: it records whose effect it found and succeeds without doing the work again.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

from django.db import connections, transaction

from django_blamequeue import current_job, job

from .models import Redelivery, Run, SideEffect, Write

QUEUE = "proc"
#: What ``{"leak_mb": n}`` runs keep for the process's life (the recycling test's leak).
LEAKED: list[bytes] = []


class LeaseGone(Exception):
    """This run no longer holds the job's lease; another worker owns the effect now."""


# Raw SQL: two statements a run, so that the handler costs little next to the queue itself.
# The job table is the backend's: the local one's, or the SQS backend's ledger.
FENCE = "SELECT id FROM {table} WHERE id = %s AND lease_token = %s AND state = 'inflight'"
STORE = (
    "INSERT INTO procapp_sideeffect (job_id, pid, token, attempt, host_clock) "
    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (job_id) DO NOTHING RETURNING id"
)


def hold_gil(seconds: float) -> None:
    """Sleep without releasing the GIL (libc's ``usleep`` through ``ctypes.PyDLL``, which
    keeps the GIL across the call): the worker's main thread cannot renew its leases
    meanwhile, as with a handler stuck in C code that holds the GIL."""
    ctypes.PyDLL(None).usleep(int(seconds * 1_000_000))


@job(queue=QUEUE, name="procapp.effect")
def effect(payload: dict[str, Any] | None) -> dict[str, int]:
    """Store this job's effect once; ``{"sleep": s}`` works ``s`` seconds first.

    ``{"hold_gil": s, "hold_attempts": n}``: attempts up to ``n`` hold the GIL ``s`` seconds
    and end there, without the effect (their lease is lost by then: their ack is refused).
    ``{"leak_mb": n}`` keeps ``n`` MB of written memory for the life of the process.
    """
    payload = payload or {}
    if payload.get("leak_mb"):
        LEAKED.append(b"\x01" * (int(payload["leak_mb"]) * 2**20))  # written: resident
    seconds = float(payload.get("sleep", 0))
    if seconds:
        time.sleep(seconds)
    ctx = current_job()
    if payload.get("hold_gil") and ctx.attempt <= int(payload.get("hold_attempts", 1)):
        hold_gil(float(payload["hold_gil"]))
        return {"pid": os.getpid(), "held": 1}
    store_effect(ctx)
    return {"pid": os.getpid()}


def store_effect(ctx: Any) -> None:
    """The job's effect, once, fenced by its lease token (a redelivery records whose it found)."""
    db: str = ctx.backend.db
    connection = connections[db]
    table = ctx.backend.jobtable.name
    fence = FENCE.format(table=table) + (" FOR UPDATE" if connection.vendor == "postgresql" else "")
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


@job(queue=QUEUE, name="procapp.run", concurrency_key=lambda p: (p or {}).get("key"))
def run(payload: dict[str, Any] | None) -> dict[str, int]:
    """A run with its start and end on record (``Run``), ``{"sleep": s}`` long, then the
    effect as ``procapp.effect`` stores it: the control-plane fault tests read the overlaps."""
    payload = payload or {}
    ctx = current_job()
    db: str = ctx.backend.db  # type: ignore[attr-defined]
    record = Run.objects.using(db).create(
        job_id=ctx.job_id, key=payload.get("key"), pid=os.getpid(), started=time.time()
    )
    time.sleep(float(payload.get("sleep", 0)))
    store_effect(ctx)
    Run.objects.using(db).filter(pk=record.pk).update(ended=time.time())
    return {"pid": os.getpid()}


# -- effects (tests/processes/test_effects.py): a write with no unique constraint -------------
def write_then_wait(payload: dict[str, Any] | None, tag: str) -> dict[str, int]:
    """Write one ``Write`` row, then (first attempt, or ``always``) work ``sleep`` seconds in
    10 ms naps; ``mark``: a file created once the write is done (the test freezes the worker
    then)."""
    from pathlib import Path

    from .models import Write

    payload = payload or {}
    ctx = current_job()
    Write.objects.using(ctx.backend.effects_database).create(
        job_id=ctx.job_id, attempt=ctx.attempt, token=ctx.token, pid=os.getpid(), tag=tag
    )
    if payload.get("mark") and ctx.attempt == 1:
        Path(payload["mark"]).write_text(str(os.getpid()))
    seconds = float(payload.get("sleep", 0)) if ctx.attempt == 1 or payload.get("always") else 0
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        time.sleep(0.01)
    return {"pid": os.getpid()}


@job(queue=QUEUE, name="procapp.plain_write", max_attempts=10_000)
def plain_write(payload: dict[str, Any] | None) -> dict[str, int]:
    return write_then_wait(payload, "plain")


@job(queue=QUEUE, name="procapp.atomic_write", max_attempts=10_000, atomic=True)
def atomic_write(payload: dict[str, Any] | None) -> dict[str, int]:
    return write_then_wait(payload, "atomic")


def _log(path: str) -> int:
    """An append-only log of done work: each line one ``os.write``, so a line written
    before a SIGKILL is there after it (the kernel has it; no buffer of ours to lose)."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


@job(queue=QUEUE, name="procapp.steps", max_attempts=10)
def steps(payload: dict[str, Any]) -> dict[str, int]:
    """A long job of ``steps`` steps of ``sleep`` seconds that resumes from its checkpoint:
    each step logs ``steps <job> <step> <pid>`` once done, then checkpoints the next step
    (throttled: the steps are slower than ``PROGRESS_THROTTLE``, so each one is written)."""
    ctx = current_job()
    start = ctx.last_checkpoint or 0
    fd = _log(payload["log"])
    try:
        for step in range(start, payload["steps"]):
            time.sleep(payload["sleep"])  # the step's work
            os.write(fd, f"steps {ctx.job_id} {step} {os.getpid()}\n".encode())
            ctx.checkpoint(step + 1)
    finally:
        os.close(fd)
    return {"resumed_from": start}


@job(queue=QUEUE, name="procapp.batch", max_attempts=10)
def batch(payload: dict[str, Any]) -> dict[str, int]:
    """A batch of ``items`` quick items that resumes from its checkpoint: each item logs
    ``batch <job> <item> <pid>``, then waits for its checkpoint to be stored
    (``wait=True``), so no item done before a kill is redone but the one in flight."""
    ctx = current_job()
    start = ctx.last_checkpoint or 0
    fd = _log(payload["log"])
    try:
        for item in range(start, payload["items"]):
            os.write(fd, f"batch {ctx.job_id} {item} {os.getpid()}\n".encode())
            ctx.checkpoint(item + 1, wait=True)
    finally:
        os.close(fd)
    return {"resumed_from": start}


def _step_write(tag: str) -> str:
    """A workflow step's work: one ``Write`` row (no unique key: a second run is a second
    row), then 5 ms of work, so kills land inside steps as well as between them."""
    ctx = current_job()
    Write.objects.using(ctx.backend.effects_database).create(
        job_id=ctx.job_id, attempt=ctx.attempt, token=ctx.token, pid=os.getpid(), tag=tag
    )
    time.sleep(0.005)
    return tag


@job(queue=QUEUE, name="procapp.ten_steps", max_attempts=10_000, durable=True)
def ten_steps(payload: dict[str, Any] | None) -> dict[str, int]:
    """Ten steps, the even ones atomic (their row commits with the step's record) and the
    odd ones plain (their row is written before the step is recorded)."""
    ctx = current_job()
    for i in range(10):
        if i % 2 == 0:
            ctx.atomic_step(f"s{i}", _step_write, f"s{i}")
        else:
            ctx.step(f"s{i}", _step_write, f"s{i}")
    return {"steps": 10}


@job(queue=QUEUE, name="procapp.await_event", max_attempts=3, durable=True)
def await_event(payload: dict[str, Any]) -> dict[str, Any]:
    """Waits for event ``proc.go``/``key`` (sent by the test process), with its pid."""
    ctx = current_job()
    got = ctx.wait_for_event("proc.go", key=payload["key"], timeout=600)
    return {"got": got, "pid": os.getpid()}
