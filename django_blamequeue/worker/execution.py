"""One claimed job as a run: decode, dispatch, catch, and the outcome it ends with.

The worker's main thread owns the decisions (acks, timeouts, cancels); this module only turns
a handler call into a ``core.lifecycle`` outcome (``slots.py`` and ``event_loop.py`` run it and hand
it back) and that outcome into a transition.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from asgiref.sync import async_to_sync

from django_blamequeue import encryption
from django_blamequeue.backends.base import Backend
from django_blamequeue.conf import get_settings
from django_blamequeue.context import JobContext
from django_blamequeue.core import lifecycle, retry
from django_blamequeue.core.records import AckResult, Claimed, Transition
from django_blamequeue.core.retry import RetryPolicy
from django_blamequeue.core.states import Reason, State
from django_blamequeue.core.texts import MAX_ERROR, MAX_TRACEBACK
from django_blamequeue.core.validation import MAX_SECONDS
from django_blamequeue.exceptions import ErrorCode, JobInterrupted, Park, QueueError, Snooze
from django_blamequeue.jobs import calls, registry
from django_blamequeue.jobs.flows import build_children
from django_blamequeue.serializers import decode, encode
from django_blamequeue.worker.interrupt import Guard
from django_blamequeue.worker.notify import send_started

logger = logging.getLogger("django_blamequeue.worker")

Handler = Callable[[Any, JobContext], Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningJob:
    """What a ``consume`` handler receives as ``job``."""

    job_id: str
    queue: str
    name: str
    payload: Any
    attempt: int
    max_attempts: int
    priority: int
    trace_id: str | None
    classification: str | None
    flow_id: str | None
    parent_id: str | None


@dataclass(eq=False, kw_only=True, slots=True)
class Run:
    """One attempt in flight. ``lock`` decides the race between finishing and being abandoned."""

    claimed: Claimed
    ctx: JobContext
    started: float
    deadline: float | None
    renew_at: float
    lease_until: float
    definition: registry.JobDefinition | None
    #: The worker's lease length (seconds): renewals keep half of it ahead.
    lease: float = 30.0
    guard: Guard = field(default_factory=Guard)
    lock: threading.Lock = field(default_factory=threading.Lock)
    outcome: lifecycle.Outcome | None = None
    abandoned: bool = False
    #: Its job was leased to this worker again (its own lease had run out): a newer run
    #: replaced it, and its outcome is dropped, never acked.
    superseded: bool = False
    #: ``invoke``'s stand-in for this run (``effects.invoke_atomic`` for ``@job(atomic=True)``).
    invoker: Callable[[Run, Handler | None], lifecycle.Outcome] | None = None
    #: An atomic run committing its completion: the worker may no longer abandon it.
    committing: bool = False
    #: The ack an atomic run applied in its own transaction (or had refused): the worker
    #: only counts it, it sends no ack of its own.
    settled: AckResult | None = None
    #: Seconds its handler ran, from the moment its slot (or task) took it to its return
    #: (None: not yet, or not known): without the time it waited for a slot thread or its
    #: outcome for the main thread.
    took: float | None = None
    # A parent leased for ``collect``: its children's state, read with the claim by the
    # worker's own connection (one query for the batch instead of one per parent).
    flow_state: Any = None

    def extended(self, seconds: float) -> None:
        """The handler extended its lease by ``seconds`` (``JobContext.on_extend``): renew
        from there, half a lease before it ends."""
        now = time.monotonic()
        self.lease_until = max(self.lease_until, now + seconds)
        self.renew_at = max(self.renew_at, self.lease_until - self.lease / 2)

    def abandon(self, exc_type: type[JobInterrupted]) -> bool:
        """Claim the decision for the worker; False if the handler already finished."""
        with self.lock:
            if self.outcome is not None or self.abandoned or self.committing:
                return False
            self.abandoned = True
        self.ctx._cancelled.set()
        self.guard.interrupt(exc_type)
        return True

    def begin_commit(self) -> bool:
        """An atomic run is about to commit; False if the worker already took it over."""
        with self.lock:
            if self.abandoned:
                return False
            self.committing = True
            return True


def new_run(c: Claimed, backend: Backend, now: float, lease: float, throttle: float) -> Run:
    """A claimed job as a run about to start (monotonic ``now``), with its context."""
    try:
        definition = registry.get(c.name)
    except Exception:  # a resolver that failed (an import): the run will say "no handler"
        logger.exception("looking up the handler of job %s failed", c.job_id)
        definition = None
    timeout = c.timeout or (definition.options.timeout if definition else None)
    ctx = JobContext(
        job_id=c.job_id,
        queue=c.queue,
        name=c.name,
        attempt=c.attempt,
        max_attempts=c.max_attempts,
        trace_id=c.trace_id,
        backend=backend,
        token=c.token,
        progress_throttle=throttle,
        previous_checkpoint=c.checkpoint,
        encrypted=encryption.is_encrypted(c.payload),
    )
    return Run(
        claimed=c,
        ctx=ctx,
        started=now,
        deadline=now + timeout if timeout else None,
        renew_at=now + lease / 2,
        lease_until=now + lease,
        definition=definition,
        lease=lease,
    )


def read_flow_states(backend: Backend, runs: list[Run]) -> None:
    """The children's state of each parent leased for ``collect``, in one read on the
    worker's connection. If it fails, each run reads its own in its slot."""
    collects = [r for r in runs if r.claimed.flow_phase == "collect"]
    if not collects:
        return
    try:
        states = backend.flow_states([r.claimed.job_id for r in collects])
    except Exception:
        logger.debug("reading flow states with the claim failed", exc_info=True)
        return
    for r in collects:
        r.flow_state = states.get(r.claimed.job_id)


def invoke(run: Run, handler: Handler | None) -> lifecycle.Outcome:
    """Call the handler; every way it can end becomes an outcome (interrupts propagate).
    A handler that answers a coroutine (an ``async def`` one, run off the worker's event
    loop: ``testing.run_jobs``, a wrapped coroutine function) is run to its end here."""
    call = prepare(run, handler)
    if not callable(call):
        return call
    send_started(run)
    try:
        result = call()
        if type(result) not in _PLAIN and inspect.isawaitable(result):
            result = async_to_sync(_awaited)(result)
    except JobInterrupted as exc:
        if run.abandoned:  # the worker's own interrupt
            raise
        return lifecycle.Raised(exc, lifecycle.format_traceback(exc))  # the handler raised it
    except BaseException as exc:  # a handler's SystemExit must not kill the worker
        return lifecycle.Raised(exc, lifecycle.format_traceback(exc))
    return succeeded(result)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


#: Results that cannot be awaitable (what most handlers return), answered without asking
#: ``inspect.isawaitable``'s ABC check.
_PLAIN = frozenset({type(None), bool, int, float, str, bytes, dict, list, tuple})

#: ``is_async``'s answers: id(handler or definition) → (it, answer), checked by identity.
_asyncs: dict[int, tuple[object, bool]] = {}


def is_async(run: Run, handler: Handler | None) -> bool:
    """Whether the run's handler is an ``async def`` (it then runs on the event loop)."""
    key: object = handler if handler is not None else run.definition
    if key is None:
        return False
    cached = _asyncs.get(id(key))
    if cached is not None and cached[0] is key:
        return cached[1]
    if handler is not None:
        answer = inspect.iscoroutinefunction(handler)
    else:
        d = run.definition
        answer = d is not None and d.flow is None and inspect.iscoroutinefunction(d.func)
    if len(_asyncs) >= 1024:
        _asyncs.clear()
    _asyncs[id(key)] = (key, answer)
    return answer


def prepare(run: Run, handler: Handler | None) -> lifecycle.Outcome | Callable[[], Any]:
    """What to call for this run, or the outcome that it cannot run (decoding, flow phases
    and a missing handler decided here, for the slot threads and the event loop alike)."""
    claimed = run.claimed
    if claimed.problem:  # a stored row that cannot be read (backends/readback.py)
        return lifecycle.BadJob(f"the stored job cannot be read: {claimed.problem}")
    try:
        payload = decode(
            claimed.payload.content_type, claimed.payload.content_encoding, claimed.payload.body
        )
    except QueueError as exc:
        if exc.code == ErrorCode.DECRYPT_FAILED:
            return lifecycle.BadJob(exc.message, reason=Reason.DECRYPT_FAILED)
        return lifecycle.BadJob(f"payload cannot be decoded: {lifecycle.describe(exc)}")
    except Exception as exc:
        return lifecycle.BadJob(f"payload cannot be decoded: {lifecycle.describe(exc)}")
    spec = run.definition.flow if run.definition is not None else None
    if claimed.flow_phase and (handler is not None or spec is None):
        return lifecycle.BadJob(
            f"job {claimed.job_id} carries flow state (phase {claimed.flow_phase!r}) but was "
            f"claimed by a plain handler; register the @flow class {claimed.name!r} on this worker"
        )
    if spec is not None and handler is None:
        send_started(run)  # a flow's phase runs here, in the slot thread
        return _flow_phase(run, spec, payload)
    if handler is None:
        if run.definition is None:
            return lifecycle.BadJob(
                f"no handler is registered for job name {claimed.name!r} on this worker"
            )
        func = run.definition.func
        return lambda: calls.call_with(func, payload)
    job = RunningJob(
        job_id=claimed.job_id,
        queue=claimed.queue,
        name=claimed.name,
        payload=payload,
        attempt=claimed.attempt,
        max_attempts=claimed.max_attempts,
        priority=claimed.priority,
        trace_id=claimed.trace_id,
        classification=claimed.classification,
        flow_id=claimed.flow_id,
        parent_id=claimed.parent_id,
    )
    return lambda: handler(job, run.ctx)


def succeeded(result: Any) -> lifecycle.Outcome:
    """A handler's return value as the outcome (its result encoded, or why it cannot be)."""
    try:
        encoded = encode(result) if result is not None else None
    except Exception as exc:
        return lifecycle.Raised(exc, lifecycle.format_traceback(exc))
    return lifecycle.Succeeded(encoded)


def _flow_phase(run: Run, spec: Any, payload: Any) -> lifecycle.Outcome:
    """Phase by the stored manifest: none yet → fan out; parked and re-pended → collect."""

    claimed = run.claimed
    backend = run.ctx.backend
    try:
        if claimed.flow_phase == "collect":
            state = (
                run.flow_state if run.flow_state is not None else backend.flow_state(claimed.job_id)
            )
            result = spec.collect(payload, state)
            return lifecycle.Succeeded(encode(result) if result is not None else None)
        children = build_children(
            spec, claimed, payload, backend.alias, get_settings().max_flow_depth
        )
    except JobInterrupted as exc:
        if run.abandoned:
            raise
        return lifecycle.Raised(exc, lifecycle.format_traceback(exc))
    except QueueError as exc:
        return lifecycle.BadJob(f"fan-out refused: {exc}")
    except BaseException as exc:
        return lifecycle.Raised(exc, lifecycle.format_traceback(exc))
    return lifecycle.FannedOut(children)


def snoozed(exc: Snooze) -> lifecycle.Outcome:
    """``Snooze(seconds)`` as an outcome; seconds that are not a number from 0 to 100 years
    make it an error of the handler's (retried or dead-lettered like any other)."""
    seconds = exc.seconds
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 <= seconds <= MAX_SECONDS
    ):
        bad = QueueError(
            ErrorCode.BAD_ARGUMENT,
            f"Snooze seconds must be a number from 0 to {MAX_SECONDS:,}, not {seconds!r}",
        )
        return lifecycle.Raised(bad, lifecycle.format_traceback(exc))
    return lifecycle.Snoozed(float(seconds))


def transition_for(
    claimed: Claimed, definition: registry.JobDefinition | None, outcome: lifecycle.Outcome
) -> Transition:
    """The lifecycle's decision for one attempt, with the settings' backoff and the job's
    ``retryable`` predicate (the worker and ``testing`` both decide through here). A handler
    that raised ``Snooze`` (in a thread, on the event loop, in a flow phase) snoozes."""
    snoozes = claimed.snoozes
    if isinstance(outcome, lifecycle.Raised) and isinstance(outcome.exc, Snooze):
        outcome = snoozed(outcome.exc)
    elif isinstance(outcome, lifecycle.Raised) and isinstance(outcome.exc, Park):
        # a durable workflow parks: no attempt spent, and no MAX_SNOOZES (docs/workflows.md)
        outcome = lifecycle.Snoozed(min(max(float(outcome.exc.seconds), 0.0), MAX_SECONDS))
        snoozes = 0
    policy = policy_for(definition)
    transition = lifecycle.decide(
        outcome,
        attempt=claimed.attempt,
        max_attempts=claimed.max_attempts,
        policy=policy,
        snoozes=snoozes,
    )
    if encryption.is_encrypted(claimed.payload):
        return _sealed(transition)
    return transition


def _sealed(transition: Transition) -> Transition:
    """An encrypted job's transition as stored: its result and error text encrypted too
    (docs/encryption.md). A job whose payload no key opened keeps its error plain: it says
    only that, and it must be readable where no key is."""
    if transition.reason == Reason.DECRYPT_FAILED:
        return transition
    try:
        return replace(
            transition,
            result=None if transition.result is None else encryption.seal(transition.result),
            error=encryption.seal_text(transition.error, MAX_ERROR),
            traceback=encryption.seal_text(transition.traceback, MAX_TRACEBACK, keep_tail=True),
        )
    except QueueError as exc:  # the keys went away while it ran: store nothing in clear
        return Transition(
            state=State.FAILED, error=f"cannot encrypt: {exc.message}", reason=Reason.DECRYPT_FAILED
        )


def policy_for(definition: registry.JobDefinition | None) -> RetryPolicy:
    """The retry policy of a job: its own backoff options, else the settings'
    (``core/retry.py``, built once per definition and settings object)."""
    return retry.policy_for(definition.options if definition else None, get_settings())
