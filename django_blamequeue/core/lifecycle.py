"""How an attempt's outcome becomes a state transition (docs/lifecycle.md), as pure functions.

The worker turns what happened into an ``Outcome``; ``decide`` answers the ``Transition``;
the backend applies it atomically, fenced by the lease token. Nothing here touches storage,
so every rule is testable as a table.
"""

from __future__ import annotations

import traceback as tb
from dataclasses import dataclass, replace

from django_blamequeue.core.limits import handback_delay, handler_gone
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import ChildSpec, Transition
from django_blamequeue.core.retry import RetryPolicy, is_retryable
from django_blamequeue.core.states import Reason, State, can_transition
from django_blamequeue.exceptions import JobTimeout, Retry, Unrecoverable

#: The retry policy (``core/retry.py``) under the name the lifecycle's callers know.
Policy = RetryPolicy


@dataclass(frozen=True, slots=True)
class Succeeded:
    result: Encoded | None


@dataclass(frozen=True, slots=True)
class Raised:
    exc: BaseException
    traceback: str = ""


@dataclass(frozen=True, slots=True)
class TimedOut:
    timeout: float


@dataclass(frozen=True, slots=True)
class Cancelled:
    pass


@dataclass(frozen=True, slots=True)
class Released:
    """Graceful shutdown: the attempt was not really made."""


@dataclass(frozen=True, slots=True)
class FannedOut:
    """A flow parent's phase 1 ended: park it with this manifest."""

    children: tuple[ChildSpec, ...]


@dataclass(frozen=True, slots=True)
class BadJob:
    """The job cannot run here at all (unknown name, undecodable payload, ...)."""

    message: str
    reason: Reason = Reason.BAD_JOB  # DECRYPT_FAILED: no configured key opens its payload


@dataclass(frozen=True, slots=True)
class Snoozed:
    """The handler raised ``Snooze(seconds)``: run it again later, no attempt spent."""

    seconds: float


@dataclass(frozen=True, slots=True)
class NoHandler:
    """This worker has no handler for the job's name (a rolling deploy: newer code enqueued
    it, or older code a worker was not deployed with). ``age``: seconds since the job was
    created, by the engine's clock; ``known_elsewhere``: another live worker has it."""

    name: str
    age: float
    known_elsewhere: bool
    worker: str = ""


Outcome = (
    Succeeded | Raised | TimedOut | Cancelled | Released | BadJob | FannedOut | Snoozed | NoHandler
)


#: The longest description ``describe`` answers (characters); the traceback keeps the rest.
DESCRIBE_LIMIT = 4096


def describe(exc: BaseException) -> str:
    """``Type: message`` for the job's error, at most ``DESCRIBE_LIMIT`` characters.

    Never raises: it runs on the worker's main loop, and an exception is the handler's own
    object. When ``str(exc)`` raises, its ``repr`` stands in; when that raises too, the type
    alone, marked as unprintable.
    """
    name = _type_name(exc)
    try:
        text = str(exc)
    except BaseException:  # any failure of a handler's __str__
        try:
            text = f"(str() failed) {exc!r}"
        except BaseException:
            text = "(str() and repr() failed)"
    if not isinstance(text, str):  # pragma: no cover - str() answers a str or raises
        text = ""
    described = f"{name}: {text}" if text else name
    if len(described) <= DESCRIBE_LIMIT:
        return described
    cut = len(described) - DESCRIBE_LIMIT + 40
    return f"{described[: DESCRIBE_LIMIT - 40]}… [{cut:,} more characters]"


def _type_name(exc: BaseException) -> str:
    try:
        return str(type(exc).__name__)
    except BaseException:  # a metaclass may do anything
        return "Exception"


def class_path(exc: BaseException) -> str:
    """``module.QualName`` of the exception's class (``builtins.ValueError``): what a job
    stores as ``error_type``, so code can match an error by class without parsing its text.
    Never raises; at most 255 characters."""
    try:
        cls = type(exc)
        path = f"{cls.__module__}.{cls.__qualname__}"
    except BaseException:  # a metaclass may do anything
        return "builtins.Exception"
    return path if len(path) <= 255 else path[:255]


#: The ``error_type`` of an attempt that ran past its timeout.
TIMEOUT_TYPE = f"{JobTimeout.__module__}.{JobTimeout.__qualname__}"


def format_traceback(exc: BaseException) -> str:
    """The traceback as text; never raises (a handler's exception may break any formatting:
    its ``__notes__``, its chain, its ``__str__``). The stored text is bounded later
    (``texts.MAX_TRACEBACK``)."""
    try:
        return "".join(tb.format_exception(type(exc), exc, exc.__traceback__))
    except BaseException:  # any failure of the handler's own objects
        try:
            frames = "".join(tb.format_tb(exc.__traceback__))
        except BaseException:
            frames = ""
        return f"Traceback (most recent call last):\n{frames}{describe(exc)}\n"


def unstorable(transition: Transition, exc: BaseException) -> Transition:
    """What to ack instead of ``transition`` when the engine refused to store it (not for
    want of a connection: the ack itself was refused, again and again). The same decision
    with a plain ASCII note for its error and no traceback; a success or a fan-out whose
    result or manifest could not be stored fails instead: the job ran, but its answer is lost,
    and an operator decides (``dlq_retry``)."""
    note = f"the backend refused to store this attempt's outcome ({describe(exc)})"
    note = note.encode("ascii", "backslashreplace").decode("ascii")
    if transition.state in (State.DONE, State.WAITING_CHILDREN):
        return Transition(state=State.FAILED, error=note, reason=Reason.ERROR)
    return replace(
        transition, error=note, error_type=None, traceback=None, result=None, children=()
    )


def _retry_or_fail(
    attempt: int,
    max_attempts: int,
    policy: RetryPolicy,
    error: str,
    trace: str,
    reason: Reason,
    delay: float | None = None,
    *,
    error_type: str | None,
) -> Transition:
    """Back to pending after ``delay`` (None: the policy's backoff) while attempts are left."""
    if attempt < max_attempts:
        if delay is None:
            delay = policy.delay(attempt)
        return Transition(
            state=State.PENDING,
            delay=delay,
            error=error,
            error_type=error_type,
            traceback=trace,
            reason=reason,
        )
    return Transition(
        state=State.FAILED, error=error, error_type=error_type, traceback=trace, reason=reason
    )


def decide(
    outcome: Outcome, *, attempt: int, max_attempts: int, policy: RetryPolicy, snoozes: int = 0
) -> Transition:
    """The transition for one attempt (``attempt`` is 1-based, counted at claim); always one
    that ``states.ALLOWED`` permits from ``inflight``, the only state an ack applies to.
    ``snoozes``: how often the job snoozed before this attempt."""
    if isinstance(outcome, Snoozed | NoHandler):
        transition = _hand_back(outcome, policy=policy, snoozes=snoozes)
    else:
        transition = _decide(outcome, attempt=attempt, max_attempts=max_attempts, policy=policy)
    if not can_transition(State.INFLIGHT, transition.state):  # pragma: no cover - a bug here
        raise AssertionError(f"decided {transition.state} from inflight: not allowed")
    return transition


def _decide(
    outcome: Outcome, *, attempt: int, max_attempts: int, policy: RetryPolicy
) -> Transition:
    match outcome:
        case Succeeded(result):
            return Transition(state=State.DONE, result=result, yields_to_cancel=False)
        case Raised(exc, trace):
            error, kind = describe(exc), class_path(exc)
            if isinstance(exc, Retry):  # asked for by the handler: spends the attempt
                return _retry_or_fail(
                    *(attempt, max_attempts, policy, error, trace, Reason.ERROR, exc.delay),
                    error_type=kind,
                )
            if isinstance(exc, Unrecoverable):
                return Transition(
                    state=State.FAILED,
                    error=error,
                    error_type=kind,
                    traceback=trace,
                    reason=Reason.UNRECOVERABLE,
                )
            if not is_retryable(exc, policy.retryable):
                return Transition(
                    state=State.FAILED,
                    error=error,
                    error_type=kind,
                    traceback=trace,
                    reason=Reason.NOT_RETRYABLE,
                )
            return _retry_or_fail(
                attempt, max_attempts, policy, error, trace, Reason.ERROR, error_type=kind
            )
        case TimedOut(timeout):
            error = f"JobTimeout: the attempt ran past its timeout of {timeout:g} s"
            return _retry_or_fail(
                attempt, max_attempts, policy, error, "", Reason.TIMEOUT, error_type=TIMEOUT_TYPE
            )
        case Cancelled():
            return Transition(
                state=State.CANCELLED, error="cancelled while running", reason=Reason.CANCELLED
            )
        case Released():
            return Transition(state=State.PENDING, give_back_attempt=True)
        case FannedOut(children):
            return Transition(state=State.WAITING_CHILDREN, children=children)
        case BadJob(message, reason):
            return Transition(state=State.FAILED, error=message, reason=reason)
    raise AssertionError(f"unknown outcome {outcome!r}")  # pragma: no cover


def _hand_back(outcome: Snoozed | NoHandler, *, policy: RetryPolicy, snoozes: int) -> Transition:
    """A job that did not really run: back to pending with the attempt given back, or failed
    when it has snoozed ``max_snoozes`` times / waited ``missing_handler_timeout`` for a
    handler no live worker has."""
    if isinstance(outcome, Snoozed):
        if snoozes >= policy.max_snoozes:
            return Transition(
                state=State.FAILED,
                error=f"Snooze: the job snoozed {snoozes} times, the most it may "
                f"({policy.max_snoozes}: @job(max_snoozes=), else MAX_SNOOZES); it fails "
                "instead of snoozing forever",
                reason=Reason.SNOOZED_TOO_OFTEN,
            )
        return Transition(
            state=State.PENDING,
            delay=outcome.seconds,
            give_back_attempt=True,
            snoozed=True,
            reason=Reason.SNOOZED,
        )
    timeout = policy.missing_handler_timeout
    if handler_gone(outcome.age, known_elsewhere=outcome.known_elsewhere, timeout=timeout):
        return Transition(
            state=State.FAILED,
            error=f"no worker has a handler for job name {outcome.name!r}: the job waited "
            f"{outcome.age / 86400:.1f} days, longer than MISSING_HANDLER_TIMEOUT "
            f"({timeout / 86400:g} days); deploy the code that defines it, then retry the "
            "job from the DLQ",
            reason=Reason.NO_HANDLER,
        )
    where = f" on worker {outcome.worker}" if outcome.worker else ""
    return Transition(
        state=State.PENDING,
        delay=handback_delay(outcome.age, known_elsewhere=outcome.known_elsewhere),
        give_back_attempt=True,
        error=f"no handler for job name {outcome.name!r}{where}: handed back, without "
        "spending an attempt, for a worker that has one",
        reason=Reason.NO_HANDLER,
    )


def on_probation(*, stalls: int, max_stalled: int) -> bool:
    """A job whose next stall may dead-letter it runs alone in its worker (rule: rescue).

    After a crash nobody can tell which of the worker's jobs killed it. So a stall in company
    is never the last straw: a job that reached ``max_stalled`` runs alone, and only a stall
    of such a run counts against it. ``max_stalled`` 0 keeps no probation (any stall fails).
    """
    return max_stalled > 0 and stalls >= max_stalled


def rescue(
    *,
    attempts: int,
    max_attempts: int,
    stalls: int,
    max_stalled: int,
    cancel_requested: bool = False,
    alone: bool = False,
) -> State:
    """rule: rescue — where an expired lease goes: back to pending, or the DLQ once it
    stalled too often; cancelled if a cancel was requested meanwhile.

    ``stalls`` is the count *including* this expiry. A crash does not give the attempt back,
    so a job whose last attempt stalled has no attempt left and fails too. Past
    ``max_stalled`` a job fails only if it ran ``alone`` when its lease expired (its worker
    had marked the lease, ``on_probation``): a crash of a worker running several jobs
    convicts none of them, it puts them all on probation.
    """
    if cancel_requested:
        return State.CANCELLED
    if attempts >= max_attempts:
        return State.FAILED
    if stalls > max_stalled and (alone or max_stalled == 0):
        return State.FAILED
    return State.PENDING
