"""``@job(atomic=True)``: the handler's writes and the job's completion commit together.

A slot thread runs the handler inside one transaction on the backend's ``effects_database``
and, before committing, fences the completion there (``Backend.fence_effects``; the commit
or rollback below is rule: effects-once):

- local backend, SQS ledger: the fenced done ack is a statement of that transaction. A run
  whose lease was taken over matches no row; everything rolls back and the attempt ends
  ``LOCK_LOST`` (audited after the rollback). The worker sends no second ack.
- redis: the transaction inserts the job's completion mark; the Lua ack follows the commit,
  through the worker's batch as usual. A run that finds another run's mark rolls back and
  completes the job with that run's result.

A failing attempt rolls its writes back and is acked as a failure by the worker, as any
other. So is a cancel that wins over the completion: its writes roll back too. Costs, stated
in docs/effects.md: one commit per atomic job (no ack batching); on SQLite the write lock is
held while the handler runs, so its lease is not renewed meanwhile (nobody can take the job
over while the lock is held), and a worker's atomic runs take turns (``atomic_turns``).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from django.db import close_old_connections, connections, transaction

from django_blamequeue import audit
from django_blamequeue.core import lifecycle, rules
from django_blamequeue.core.records import Ack, AckResult, Transition
from django_blamequeue.core.states import State
from django_blamequeue.exceptions import JobInterrupted
from django_blamequeue.worker.execution import Handler, Run, invoke, transition_for

logger = logging.getLogger("django_blamequeue.worker")

#: What the worker counts for a run that acked in its own transaction.
SETTLED = Transition(state=State.DONE)


class _Undo(Exception):
    """Leaves the atomic block, which rolls back; carries what the worker acks instead."""

    def __init__(self, outcome: lifecycle.Outcome, why: str = "") -> None:
        super().__init__(why)
        self.outcome = outcome
        self.why = why


def prepare(run: Run) -> None:
    """Make ``run`` an atomic run (the worker calls this when it dispatches one)."""
    run.invoker = invoke_atomic
    backend = run.ctx.backend
    if backend.effects_with_ack and connections[backend.effects_database].vendor != "sqlite":
        run.ctx.detached = detached  # progress and extend_lease outside the transaction


def invoke_atomic(run: Run, handler: Handler | None) -> lifecycle.Outcome:
    """``runner.invoke`` inside the run's transaction, committed only with its completion."""
    backend = run.ctx.backend
    db = backend.effects_database
    c = run.claimed
    if backend.effects_with_ack and connections[db].vendor == "sqlite":
        # Renewals would wait for this transaction's write lock; while it is held nobody
        # can take the job over either (the rescuer writes too).
        run.renew_at = math.inf
    try:
        with transaction.atomic(using=db):
            outcome = invoke(run, handler)
            if not isinstance(outcome, lifecycle.Succeeded):
                raise _Undo(outcome)  # a failure keeps none of its writes
            if transaction.get_rollback(using=db):  # the handler doomed the transaction
                doomed = RuntimeError("the handler marked the run's transaction for rollback")
                raise _Undo(lifecycle.Raised(doomed, lifecycle.format_traceback(doomed)))
            if not run.begin_commit():
                raise _Undo(lifecycle.Released(), "abandoned")  # the worker drops this run
            ack = Ack(
                job_id=c.job_id,
                token=c.token,
                transition=transition_for(c, run.definition, outcome),
            )
            fence = backend.fence_effects(ack, attempt=c.attempt)
            applied = {"applied": True, "stale": False}.get(fence.kind)
            marked = {"marked": True, "already": False}.get(fence.kind)
            if not rules.commits_effects(ack_applied=applied, mark_inserted=marked):
                if fence.kind == "stale":
                    raise _Undo(outcome, "stale")
                raise _Undo(lifecycle.Succeeded(fence.result), f"already:{fence.attempt}")
            if fence.kind == "applied" and fence.state != State.DONE:
                raise _Undo(lifecycle.Cancelled(), "cancelled")  # cancel-wins: no writes
    except _Undo as undo:
        return _undone(run, undo, db)
    except JobInterrupted:
        raise
    except Exception as exc:  # the fence or the COMMIT failed: retry (its ack is fenced)
        logger.warning("job %s: the atomic commit failed: %s", c.job_id, exc, extra=_extra(run))
        return lifecycle.Raised(exc, lifecycle.format_traceback(exc))
    if fence.kind == "applied":
        run.settled = AckResult(job_id=c.job_id, ok=True, state=State.DONE)
    return outcome


def _undone(run: Run, undo: _Undo, db: str) -> lifecycle.Outcome:
    """After the rollback: say what happened; answer the outcome the worker acks."""
    c = run.claimed
    backend = run.ctx.backend
    if undo.why == "stale":
        logger.warning(
            "job %s: lease lost before the commit (LOCK_LOST); the attempt's writes were "
            "rolled back",
            c.job_id,
            extra=_extra(run),
        )
        _record(_lock_lost(run, "commit"), db)
        run.settled = AckResult(job_id=c.job_id, ok=False)
    elif undo.why.startswith("already:"):
        first = undo.why.partition(":")[2]
        logger.warning(
            "job %s: attempt %s already committed its effects; this attempt's writes were "
            "rolled back",
            c.job_id,
            first,
            extra=_extra(run),
        )
        event = audit.Event(
            action=audit.EFFECTS_DUPLICATE,
            job_id=c.job_id,
            queue=c.queue,
            backend=backend.alias,
            attempt=c.attempt,
            data={"rolled_back": True, "committed_by_attempt": int(first) if first else None},
        )
        _record(event, db)
    return undo.outcome


def abandoned(run: Run) -> None:
    """The worker interrupted an atomic run whose lease was lost (its heartbeat saw it
    first): the run's transaction rolls back in its thread; the audit trail says so."""
    _record(_lock_lost(run, "running"), run.ctx.backend.effects_database)


def _lock_lost(run: Run, when: str) -> audit.Event:
    """``LOCK_LOST`` of an atomic attempt: at its fenced ``commit``, or while ``running``."""
    c = run.claimed
    return audit.Event(
        action=audit.LOCK_LOST,
        job_id=c.job_id,
        queue=c.queue,
        backend=run.ctx.backend.alias,
        attempt=c.attempt,
        data={"wanted": State.DONE.value, "atomic": True, "rolled_back": True, "at": when},
    )


def _record(event: audit.Event, db: str) -> None:
    try:
        audit.record([event], using=db)
    except Exception:  # the audit row must not turn a clean rollback into a failure
        logger.warning("auditing %s failed", event.action, exc_info=True)


def _extra(run: Run) -> dict[str, object]:
    c = run.claimed
    return {"job_id": c.job_id, "queue": c.queue, "attempt": c.attempt}


# -- calls outside the handler's transaction --------------------------------------------------
_sidecar: ThreadPoolExecutor | None = None
_sidecar_lock = threading.Lock()


def detached(verb: Callable[[], bool]) -> bool:
    """Run ``verb`` (a progress write, a lease extension) on another thread, so on another
    connection, outside the handler's transaction, and wait for it."""
    global _sidecar
    with _sidecar_lock:
        if _sidecar is None:
            _sidecar = ThreadPoolExecutor(max_workers=1, thread_name_prefix="blamequeue-detached")
    return _sidecar.submit(_on_sidecar, verb).result()


def _on_sidecar(verb: Callable[[], bool]) -> bool:
    try:
        return verb()
    finally:
        close_old_connections()
