"""Job states and the transitions allowed between them, as data."""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    PENDING = "pending"  # includes delayed (available_at in the future)
    BLOCKED = "blocked"  # waits on depends_on
    INFLIGHT = "inflight"
    WAITING_CHILDREN = "waiting_children"
    DONE = "done"
    FAILED = "failed"  # the dead-letter queue
    CANCELLED = "cancelled"


TERMINAL: frozenset[State] = frozenset({State.DONE, State.FAILED, State.CANCELLED})
WAITING: frozenset[State] = frozenset({State.PENDING, State.BLOCKED})
ACTIVE: frozenset[State] = frozenset(set(State) - TERMINAL)

ALLOWED: dict[State, frozenset[State]] = {
    State.PENDING: frozenset({State.INFLIGHT, State.CANCELLED}),
    State.BLOCKED: frozenset({State.PENDING, State.CANCELLED}),
    State.INFLIGHT: frozenset(
        {
            State.DONE,
            State.PENDING,  # retry, graceful release, stalled rescue
            State.FAILED,
            State.CANCELLED,
            State.WAITING_CHILDREN,
        }
    ),
    State.WAITING_CHILDREN: frozenset({State.PENDING, State.CANCELLED}),
    State.DONE: frozenset(),
    State.FAILED: frozenset({State.PENDING}),  # DLQ retry
    State.CANCELLED: frozenset(),
}


def can_transition(src: State, dst: State) -> bool:
    return dst in ALLOWED[src]


class Reason(StrEnum):
    """Why an attempt ended the way it did (stored with the job's last error)."""

    ERROR = "error"
    UNRECOVERABLE = "unrecoverable"
    NOT_RETRYABLE = "not_retryable"
    TIMEOUT = "timeout"
    STALLED = "stalled"
    CANCELLED = "cancelled"
    BAD_JOB = "bad_job"  # undecodable payload, flow job on a plain handler
    SNOOZED = "snoozed"  # the handler raised Snooze: pending again, no attempt spent
    SNOOZED_TOO_OFTEN = "snoozed_too_often"  # past MAX_SNOOZES
    EXPIRED = "expired"  # cancelled: not started before its expires_at
    DECRYPT_FAILED = "decrypt_failed"  # no ENCRYPTION_KEYS key opens its payload: to the DLQ
    NO_HANDLER = "no_handler"  # handed back (no attempt spent), or failed once it waited too long


def reason_note(state: str, reason: str | None) -> str:
    """How to show a job's reason beside its state: why it ended for a terminal job
    ("unrecoverable"); for a live one the reason is its last attempt's, not its state's (a
    job retried from the DLQ is pending again, not unrecoverable)."""
    if not reason:
        return ""
    return reason if state in TERMINAL else f"last attempt: {reason}"
