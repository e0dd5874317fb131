"""The errors a caller can rely on: one exception type, a stable code per cause."""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Stable error codes (SPEC §3). Never renamed: callers and checks match on them."""

    INVALID_CONFIG = "INVALID_CONFIG"
    UNKNOWN_BACKEND = "UNKNOWN_BACKEND"
    PROTOCOL_UNAVAILABLE = "PROTOCOL_UNAVAILABLE"
    MISSING_QUEUE = "MISSING_QUEUE"
    INVALID_HANDLER = "INVALID_HANDLER"
    UNKNOWN_JOB = "UNKNOWN_JOB"
    BAD_RATE_LIMIT = "BAD_RATE_LIMIT"
    BAD_PAYLOAD = "BAD_PAYLOAD"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    CONTENT_DISALLOWED = "CONTENT_DISALLOWED"
    EXTEND_LEASE_UNSUPPORTED = "EXTEND_LEASE_UNSUPPORTED"
    DLQ_UNSUPPORTED = "DLQ_UNSUPPORTED"
    LOCK_LOST = "LOCK_LOST"
    BACKEND_UNAVAILABLE = "BACKEND_UNAVAILABLE"
    BAD_FLOW = "BAD_FLOW"
    FLOW_CYCLE = "FLOW_CYCLE"
    FLOW_UNKNOWN_DEP = "FLOW_UNKNOWN_DEP"
    BAD_ARGUMENT = "BAD_ARGUMENT"
    BAD_CHECKPOINT = "BAD_CHECKPOINT"
    CHECKPOINT_TOO_LARGE = "CHECKPOINT_TOO_LARGE"


class QueueError(Exception):
    """Every refusal of the queue: ``code`` is stable, ``message`` is for people.

    Bad input raises before anything is written, so catching a ``QueueError`` at enqueue
    means nothing was stored.
    """

    def __init__(self, code: ErrorCode | str, message: str = "") -> None:
        self.code = ErrorCode(code)
        self.message = message or self.code.value
        super().__init__(f"[{self.code.value}] {self.message}")

    def __reduce__(self) -> tuple[type[QueueError], tuple[str, str]]:
        return (type(self), (self.code.value, self.message))


class Unrecoverable(Exception):
    """Raised by a handler to skip the remaining attempts: the job goes to the DLQ now."""


class JobInterrupted(BaseException):
    """Raised inside a handler thread by the worker (timeout, cancel, lost lease, shutdown).

    A ``BaseException`` so that a handler's ``except Exception`` cannot swallow it.
    """

    reason = "interrupted"


class JobTimeout(JobInterrupted):
    """The job ran past its ``timeout``."""

    reason = "timeout"


class JobCancelled(JobInterrupted):
    """The job was cancelled while it ran."""

    reason = "cancelled"


class LeaseLost(JobInterrupted):
    """Another worker owns the job now; this run's outcome will be discarded."""

    reason = "lock_lost"


class WorkerShutdown(JobInterrupted):
    """The worker is stopping and the grace period is over; the job is released."""

    reason = "shutdown"
