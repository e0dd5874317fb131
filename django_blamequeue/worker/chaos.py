"""One claimed job run in the caller's thread, as a worker would, with an injected fault.

``testing.CapturedJobs.run_jobs`` runs every job through ``run_claimed``: the real handler
call (``runner.invoke``, or ``atomic.invoke_atomic`` for ``@job(atomic=True)``), the real
lifecycle decision and the real fenced ack. With ``chaos=`` it first plays, once per job, the
delivery faults every at-least-once queue has (``play``):

- ``"duplicate"``: the job runs to its ack, then is delivered a second time with the same id
  and lease (a lost ack's redelivery, an SQS double delivery); the second ack is refused.
- ``"takeover"``: the lease expires while the run is still working; the sweeper re-pends
  the job and another run takes it over. The first run's ack is refused.
- ``"crash_before_ack"``: the handler returns, the worker dies before its ack; the lease
  expires and the job runs again.

A naive handler shows its double effect; an idempotent or atomic one shows one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django_blamequeue import encryption
from django_blamequeue.backends.base import Backend
from django_blamequeue.conf import get_settings
from django_blamequeue.context import JobContext, _current
from django_blamequeue.core.checkpoints import CheckpointSlot
from django_blamequeue.core.records import Ack, AckResult, Claimed, EffectsFence, Transition
from django_blamequeue.core.states import State
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs import registry
from django_blamequeue.jobs.workflow import Workflow
from django_blamequeue.observability import tracing
from django_blamequeue.worker import atomic
from django_blamequeue.worker.execution import Handler, Run, invoke, transition_for
from django_blamequeue.worker.notify import notify_now

MODES = ("duplicate", "takeover", "crash_before_ack")


def check_mode(chaos: object) -> str | None:
    if chaos is None or chaos in MODES:
        return chaos
    raise QueueError(
        ErrorCode.BAD_ARGUMENT, f"chaos must be one of {', '.join(MODES)} or None, not {chaos!r}"
    )


class SimulatedCrash(BaseException):
    """The worker "died" here (``crash_before_ack``): nothing after this line happened."""


class Clock:
    """The time the runs see: the engine's, moved forward instead of slept."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.offset = timedelta(0)

    def now(self) -> datetime:
        return self.backend.now() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


@dataclass(frozen=True, slots=True, kw_only=True)
class Ran:
    """How one run ended: its decision and its ack (None: no ack was sent)."""

    transition: Transition
    ack: AckResult | None
    crashed: bool = False


class _Faulty:
    """The backend as a run sees it, with ``before_fence`` called inside an atomic run's
    transaction just before its completion is fenced."""

    def __init__(self, backend: Backend, before_fence: Callable[[], None]) -> None:
        self._backend = backend
        self._before_fence = before_fence

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def fence_effects(self, ack: Ack, *, attempt: int, now: datetime | None = None) -> EffectsFence:
        self._before_fence()
        return self._backend.fence_effects(ack, attempt=attempt, now=now)


def run_claimed(
    backend: Backend,
    c: Claimed,
    handler: Handler | None,
    now: datetime,
    *,
    ack: bool = True,
    before_fence: Callable[[], None] | None = None,
) -> Ran:
    """Run ``c`` here and ack it (unless ``ack`` is False or the run crashed)."""
    definition = registry.get(c.name)
    seen: Any = _Faulty(backend, before_fence) if before_fence is not None else backend
    ctx = JobContext(
        job_id=c.job_id,
        queue=c.queue,
        name=c.name,
        attempt=c.attempt,
        max_attempts=c.max_attempts,
        trace_id=c.trace_id,
        backend=seen,
        token=c.token,
        progress_throttle=0.0,
        previous_checkpoint=c.checkpoint,
        encrypted=encryption.is_encrypted(c.payload),
    )
    slot = ctx.checkpoints = CheckpointSlot(writer=ctx._store_checkpoint)
    run = Run(
        claimed=c,
        ctx=ctx,
        started=time.monotonic(),
        deadline=None,
        renew_at=0.0,
        lease_until=0.0,
        definition=definition,
    )
    if definition is not None and definition.atomic and handler is None:
        run.invoker = atomic.invoke_atomic
        ctx.atomic = True
    if definition is not None and definition.durable and handler is None:
        ctx.workflow = Workflow(ctx, encrypted=encryption.is_encrypted(c.payload))
        ctx.clock = lambda: now  # the run's moved clock: timers and waits read it
    call = run.invoker or invoke
    token = _current.set(ctx)
    try:
        outcome = tracing.traced_run(run, handler, call) if tracing.enabled else call(run, handler)
    except SimulatedCrash:
        return Ran(transition=Transition(state=State.INFLIGHT), ack=None, crashed=True)
    finally:
        _current.reset(token)
    run.outcome = outcome
    transition = transition_for(c, definition, outcome)
    last = slot.take(close=True)  # what async code left: stored before the ack, as a worker does
    if last is not None and run.settled is None:
        backend.save_checkpoints([(c.job_id, c.token, last[0])], now)
    if run.settled is not None:
        notify_now(run, atomic.SETTLED, run.settled)
        return Ran(transition=transition, ack=run.settled)
    if not ack:
        return Ran(transition=transition, ack=None)
    [result] = backend.apply_many([Ack(job_id=c.job_id, token=c.token, transition=transition)], now)
    notify_now(run, transition, result)  # the hooks and signals a worker sends after its ack
    return Ran(transition=transition, ack=result)


def expire(backend: Backend, c: Claimed, clock: Clock) -> None:
    """The lease of ``c`` runs out and the sweeper re-pends it (or fails it as stalled)."""
    left = (c.lease_expires_at - clock.now()).total_seconds()
    clock.advance(max(left, 0.0) + 0.001)
    backend.rescue_expired(clock.now(), max_stalled=get_settings().max_stalled_count)


def play(
    mode: str, backend: Backend, c: Claimed, handler: Handler | None, clock: Clock
) -> list[tuple[Ran, str | None]]:
    """The runs of ``c`` under ``mode``, each with the fault it carried (None: a clean run).
    Whatever the fault leaves pending is claimed again by the caller's loop."""
    if mode == "duplicate":
        first = run_claimed(backend, c, handler, clock.now())
        again = run_claimed(backend, c, handler, clock.now())  # same id, same (now stale) lease
        return [(first, None), (again, mode)]
    if mode == "takeover":
        took_over: list[bool] = []

        def take_over() -> None:  # inside an atomic run's transaction: its fence sees it
            expire(backend, c, clock)
            took_over.append(True)

        ran = run_claimed(backend, c, handler, clock.now(), ack=False, before_fence=take_over)
        held = backend.get(c.job_id)
        if held is not None and held.state == State.INFLIGHT and held.attempts == c.attempt:
            expire(backend, c, clock)  # a plain run, or an atomic one whose rollback undid it
        if ran.ack is None:  # a plain run acks only now, after the takeover: refused
            [result] = backend.apply_many(
                [Ack(job_id=c.job_id, token=c.token, transition=ran.transition)], clock.now()
            )
            ran = Ran(transition=ran.transition, ack=result)
        return [(ran, mode)]
    if mode == "crash_before_ack":

        def crash() -> None:
            raise SimulatedCrash

        ran = run_claimed(backend, c, handler, clock.now(), ack=False, before_fence=crash)
        expire(backend, c, clock)
        return [(Ran(transition=ran.transition, ack=None, crashed=True), mode)]
    raise AssertionError(mode)  # pragma: no cover - check_mode refused it
