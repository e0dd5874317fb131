"""``EnqueuedJob.info()``, ``.wait()`` and ``.result()``: poll the job's backend, and say
plainly what state the job is in when waiting ends.

No result backend is needed: the job's row (or hash) holds its state, result and error. Each
poll is one idempotent ``get`` through the backend's breaker and retry wrapper; the interval
grows from 50 ms to ``poll``. An unreachable engine is polled again until the timeout. A job
not found yet may still be on its way (an outbox row of an uncommitted or unrelayed
transaction); one that was seen and then is gone was pruned.
"""

from __future__ import annotations

import time
from typing import Any

from django_blamequeue.backends import get_backend
from django_blamequeue.core.records import EnqueuedJob, JobInfo, install_waiter
from django_blamequeue.core.states import TERMINAL, State
from django_blamequeue.core.validation import MAX_SECONDS
from django_blamequeue.exceptions import (
    ErrorCode,
    JobFailed,
    JobWasCancelled,
    QueueError,
    ResultTimeout,
)

FIRST_POLL = 0.05
_TERMINAL = frozenset(s.value for s in TERMINAL)


class Waiter:
    def info(self, job: EnqueuedJob) -> JobInfo | None:
        b = get_backend(job.backend)
        return b.resilience.call(lambda: b.get(job.job_id), idempotent=True)

    def wait(self, job: EnqueuedJob, timeout: float | None, poll: float) -> JobInfo:
        timeout, poll = _checked(timeout, poll)
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = min(FIRST_POLL, poll)
        seen: JobInfo | None = None
        while True:
            try:
                info = self.info(job)
            except QueueError as exc:
                if exc.code != ErrorCode.BACKEND_UNAVAILABLE:
                    raise
                info = seen  # unreachable for now: poll again
            else:
                if info is None and seen is not None:
                    raise QueueError(
                        ErrorCode.UNKNOWN_JOB,
                        f"job {job.job_id} is gone from backend {job.backend!r} "
                        "(pruned after it finished?)",
                    )
            if info is not None and info.state in _TERMINAL:
                return info
            seen = info or seen
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                state = seen.state if seen is not None else None
                raise ResultTimeout(_still(job, seen, timeout or 0.0), state, seen)
            time.sleep(interval if left is None else min(interval, left))
            interval = min(interval * 2, poll)

    def result(self, job: EnqueuedJob, timeout: float | None, poll: float) -> Any:
        info = self.wait(job, timeout, poll)
        if info.state == State.DONE:
            return info.result
        what = f"job {info.job_id} ({info.name})"
        if info.state == State.CANCELLED:
            raise JobWasCancelled(f"{what} was cancelled: it has no result", info)
        raise JobFailed(
            f"{what} failed after {info.attempts}/{info.max_attempts} attempt(s) "
            f"({info.reason or 'error'}): {info.error or 'no error recorded'}",
            info,
        )


def _checked(timeout: Any, poll: Any) -> tuple[float | None, float]:
    for value, name, optional in ((timeout, "timeout", True), (poll, "poll", False)):
        if value is None and optional:
            continue
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not 0 < value <= MAX_SECONDS
        ):
            raise QueueError(ErrorCode.BAD_ARGUMENT, f"{name} must be seconds > 0, not {value!r}")
    return (None if timeout is None else float(timeout)), float(poll)


def _still(job: EnqueuedJob, info: JobInfo | None, timeout: float) -> str:
    """What the job is doing when the wait gives up, in words."""
    if info is None:
        return (
            f"job {job.job_id} is not on backend {job.backend!r} after {timeout:g} s "
            "(its enqueue not committed or not relayed yet?)"
        )
    detail = {
        "pending": "waiting for a worker"
        + (f", due at {info.available_at:%Y-%m-%d %H:%M:%S} UTC" if info.available_at else ""),
        "blocked": "waiting for its dependencies",
        "inflight": f"running, attempt {info.attempts}/{info.max_attempts}",
        "waiting_children": "waiting for its children",
    }.get(info.state, "")
    return f"job {info.job_id} ({info.name}) is still {info.state} after {timeout:g} s ({detail})"


def install() -> None:
    install_waiter(Waiter())
