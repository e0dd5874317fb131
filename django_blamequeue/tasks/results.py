"""Job → ``TaskResult``: the status mapping (docs/django-tasks.md), errors, worker ids."""

from __future__ import annotations

import builtins
import logging
import re
from collections.abc import Sequence
from typing import Any

from django_blamequeue.core.lifecycle import format_traceback
from django_blamequeue.core.records import JobInfo
from django_blamequeue.core.states import State
from django_blamequeue.exceptions import JobCancelled, JobTimeout
from django_blamequeue.models import TaskAttempt
from django_blamequeue.tasks.compat import (
    Task,
    TaskError,
    TaskResult,
    TaskResultStatus,
)

logger = logging.getLogger("django_blamequeue.tasks")

#: ``worker_ids`` holds one entry per attempt; an attempt with no ``TaskAttempt`` row (one
#: claimed before the row was written, or before a DLQ retry renumbered the attempts) reads this.
UNRECORDED_WORKER = "unrecorded"

_STATUS = {
    State.PENDING: "READY",
    State.BLOCKED: "READY",
    State.INFLIGHT: "RUNNING",
    State.WAITING_CHILDREN: "RUNNING",
    State.DONE: "SUCCESSFUL",
    State.FAILED: "FAILED",
    State.CANCELLED: "FAILED",
}


class TaskStalled(Exception):
    """The task's worker died or stopped renewing its lease too often (``MAX_STALLED_COUNT``)."""

    __module__ = "django_blamequeue.tasks"  # its public path, as TaskError names it


class TaskNotRunnable(Exception):
    """No worker could run the task: nothing registered under its name, or a bad payload."""

    __module__ = "django_blamequeue.tasks"


_REASON_CLASSES = {
    "timeout": f"{JobTimeout.__module__}.{JobTimeout.__qualname__}",
    "cancelled": f"{JobCancelled.__module__}.{JobCancelled.__qualname__}",
    "stalled": f"{TaskStalled.__module__}.TaskStalled",
    "bad_job": f"{TaskNotRunnable.__module__}.TaskNotRunnable",
}


# -- results -------------------------------------------------------------------------------
def _result(
    task: Task[..., Any],
    info: JobInfo,
    attempts: Sequence[TaskAttempt] = (),
    *,
    status: str | None = None,
) -> TaskResult[Any, Any]:
    """The ``TaskResult`` of a job and its recorded attempts (oldest first)."""
    payload = info.payload if isinstance(info.payload, dict) else {}
    status = status or _STATUS[State(info.state)]
    by_number = {a.attempt: a for a in attempts}
    workers = [
        by_number[n].worker_id if n in by_number else UNRECORDED_WORKER
        for n in range(1, info.attempts + 1)
    ]
    finished = status in ("SUCCESSFUL", "FAILED")
    first = min((a.started_at for a in attempts), default=None)
    result = TaskResult(
        task=task,
        id=info.job_id,
        status=TaskResultStatus(status),
        enqueued_at=info.created_at,
        started_at=first or info.started_at,
        finished_at=info.finished_at if finished else None,
        last_attempted_at=info.started_at,
        args=list(payload.get("args", [])),
        kwargs=dict(payload.get("kwargs", {})),
        backend=task.backend,
        errors=_errors(info, attempts),
        worker_ids=workers,
    )
    if status == "SUCCESSFUL":
        object.__setattr__(result, "_return_value", info.result)
    return result


def _errors(info: JobInfo, attempts: Sequence[TaskAttempt] = ()) -> list[TaskError]:
    """One error per failed attempt, oldest first; then the job's own last error where its
    last attempt recorded none (its worker died, it was cancelled or refused before it ran).
    While an attempt runs, the job's last error is an earlier attempt's, recorded already."""
    recorded = [
        TaskError(exception_class_path=a.exception_class_path, traceback=a.traceback or "")
        for a in attempts
        if a.exception_class_path
    ]
    last = next((a for a in attempts if a.attempt == info.attempts), None)
    if info.state in (State.INFLIGHT, State.DONE) or (last and last.exception_class_path):
        return recorded
    return recorded + _job_error(info)


def _job_error(info: JobInfo) -> list[TaskError]:
    """The last error kept with the job, cancellation saying so."""
    if info.state == State.CANCELLED:
        text = info.error or "cancelled before it ran"
        return [
            TaskError(
                exception_class_path=_REASON_CLASSES["cancelled"], traceback=f"cancelled: {text}"
            )
        ]
    if info.error:
        return [
            TaskError(
                exception_class_path=_class_path(info), traceback=info.traceback or info.error
            )
        ]
    if info.state == State.FAILED:
        return [
            TaskError(
                exception_class_path=_REASON_CLASSES["bad_job"],
                traceback=f"failed ({info.reason or 'no error recorded'})",
            )
        ]
    return []


def _class_path(info: JobInfo) -> str:
    """The raised exception's class path: from the reason, else the one the job stored
    (``error_type``), else the traceback's last line (a job acked before it was stored)."""
    if info.reason in _REASON_CLASSES:
        return _REASON_CLASSES[info.reason]
    if info.error_type:
        return info.error_type
    name = (info.error or "").split(":", 1)[0].strip()
    if re.fullmatch(r"[A-Za-z_]\w*", name):
        line = re.compile(rf"^((?:[A-Za-z_]\w*\.)*){re.escape(name)}(?::|$)")
        for text in reversed((info.traceback or "").splitlines()):
            if m := line.match(text):
                return f"{m.group(1) or 'builtins.'}{name}"
        if isinstance(getattr(builtins, name, None), type):
            return f"builtins.{name}"
    return "builtins.Exception"


def _error_of(exc: BaseException) -> TaskError:

    cls = type(exc)
    return TaskError(
        exception_class_path=f"{cls.__module__}.{cls.__qualname__}", traceback=format_traceback(exc)
    )


def _send(signal: Any, sender: type[Any], result: TaskResult[Any, Any]) -> None:
    for receiver, response in signal.send_robust(sender=sender, task_result=result):
        if isinstance(response, Exception):
            logger.error("%s receiver %r raised", signal, receiver, exc_info=response)
