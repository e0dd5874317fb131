"""The errors a caller can rely on: one exception type, a stable code per cause."""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Stable error codes (docs/concepts.md). Never renamed: callers and checks match on them."""

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
    JOB_FAILED = "JOB_FAILED"
    JOB_CANCELLED = "JOB_CANCELLED"
    RESULT_TIMEOUT = "RESULT_TIMEOUT"
    BAD_CHECKPOINT = "BAD_CHECKPOINT"
    CHECKPOINT_TOO_LARGE = "CHECKPOINT_TOO_LARGE"
    BAD_LIMIT = "BAD_LIMIT"
    NOT_MIGRATED = "NOT_MIGRATED"
    DUPLICATE = "DUPLICATE"
    NON_DETERMINISTIC_WORKFLOW = "NON_DETERMINISTIC_WORKFLOW"
    WAIT_TIMEOUT = "WAIT_TIMEOUT"
    CHILD_FAILED = "CHILD_FAILED"
    NOT_A_WORKFLOW = "NOT_A_WORKFLOW"
    BAD_KEY_WEIGHT = "BAD_KEY_WEIGHT"


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


class Snooze(Exception):
    """Raised by a handler: run this job again after ``seconds``, without spending an attempt.

    The job goes back to ``pending`` (audited as a snooze, counted in ``JobInfo.snoozes``);
    past ``MAX_SNOOZES`` snoozes it fails instead, so a job cannot snooze forever.
    """

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        super().__init__(f"snooze for {seconds!r} s")


class Park(BaseException):
    """A durable workflow waits (``ctx.sleep``, ``ctx.wait_for_event``, ``ctx.child``): the
    attempt ends without being spent and the job is claimed again (and replayed) after
    ``seconds``, or sooner when an event or its child wakes it. A ``BaseException``, so a
    handler's ``except Exception`` cannot swallow it; unlike ``Snooze`` it does not count
    against ``MAX_SNOOZES``: a workflow waits as often as its code says."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"parked for {seconds:g} s")


class NonDeterministicWorkflow(QueueError):
    """A replay asked for a different step than the one recorded at that place: the
    workflow's code changed its order (or branches on something not recorded in a step).
    Nothing is returned for it; give changed steps new names (docs/workflows.md)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.NON_DETERMINISTIC_WORKFLOW, message)

    def __reduce__(self) -> tuple[type[NonDeterministicWorkflow], tuple[str]]:  # type: ignore[override]
        return (type(self), (self.message,))


class WaitTimeout(QueueError):
    """``ctx.wait_for_event``: no event came before the timeout. The handler may catch it;
    every later replay raises it again at the same place."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.WAIT_TIMEOUT, message)

    def __reduce__(self) -> tuple[type[WaitTimeout], tuple[str]]:  # type: ignore[override]
        return (type(self), (self.message,))


class ChildFailed(QueueError):
    """``ctx.child``: the child job failed or was cancelled. ``state`` is its end state and
    ``error`` its last error, as recorded in the step."""

    def __init__(self, message: str, state: str = "failed", error: str = "") -> None:
        super().__init__(ErrorCode.CHILD_FAILED, message)
        self.state = state
        self.error = error

    def __reduce__(self) -> tuple[type[ChildFailed], tuple[str, str, str]]:  # type: ignore[override]
        return (type(self), (self.message, self.state, self.error))


class Retry(Exception):
    """Raised by a handler to retry its job ``delay`` seconds from now (None: the job's
    backoff). It spends the attempt, as a failure does: on the last one the job goes to the
    DLQ with this as its error. (``current_job().retry(delay)`` raises it.)"""

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        if delay is not None and (
            not isinstance(delay, int | float)
            or isinstance(delay, bool)
            or not 0 <= delay <= 3_155_760_000  # validation.MAX_SECONDS
        ):
            raise QueueError(ErrorCode.BAD_ARGUMENT, f"Retry delay must be seconds ≥ 0: {delay!r}")
        self.delay = None if delay is None else float(delay)
        self.reason = reason
        when = "with the job's backoff" if delay is None else f"in {float(delay):g} s"
        super().__init__(f"retry requested {when}" + (f": {reason}" if reason else ""))


class JobFailed(QueueError):
    """``EnqueuedJob.result()``: the job ended in the DLQ. ``info`` is its last snapshot
    (error, traceback, reason, attempts)."""

    def __init__(self, message: str, info: object) -> None:
        super().__init__(ErrorCode.JOB_FAILED, message)
        self.info = info

    def __reduce__(self) -> tuple[type[JobFailed], tuple[str, object]]:  # type: ignore[override]
        return (type(self), (self.message, self.info))


class JobWasCancelled(QueueError):
    """``EnqueuedJob.result()``: the job was cancelled; it has no result."""

    def __init__(self, message: str, info: object) -> None:
        super().__init__(ErrorCode.JOB_CANCELLED, message)
        self.info = info

    def __reduce__(self) -> tuple[type[JobWasCancelled], tuple[str, object]]:  # type: ignore[override]
        return (type(self), (self.message, self.info))


class ResultTimeout(QueueError):
    """``EnqueuedJob.result()`` / ``.wait()`` ran out of time; ``state`` is the job's state
    when it gave up (None: not found yet), ``info`` its last snapshot."""

    def __init__(self, message: str, state: str | None, info: object) -> None:
        super().__init__(ErrorCode.RESULT_TIMEOUT, message)
        self.state = state
        self.info = info

    def __reduce__(self) -> tuple[type[ResultTimeout], tuple[str, str | None, object]]:  # type: ignore[override]
        return (type(self), (self.message, self.state, self.info))


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
