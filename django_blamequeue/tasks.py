"""A ``django.tasks`` backend (SPEC §10): ``@task`` functions run as blamequeue jobs.

```python
TASKS = {
    "default": {
        "BACKEND": "django_blamequeue.tasks.BlameQueueBackend",
        "QUEUES": ["default", "emails"],             # Django's own key; [] allows any queue
        "OPTIONS": {"BLAMEQUEUE_BACKEND": "default"},  # a BLAMEQUEUE["BACKENDS"] alias
    }
}
```

A task is a job named by the task's module path, whose payload is ``{"args", "kwargs",
"task"}``; ``runworker`` runs it with the whole lifecycle (leases, retries, timeouts, the DLQ,
crash recovery). Django's priority (-100..100, higher first) is the job's priority unchanged:
both scales run higher numbers first, so tasks and ``@job`` jobs on one queue interleave by
the same number. ``run_after`` is the job's ``run_at``. ``@task(max_attempts=, timeout=,
dedupe_key=)`` reach the job (Django 6.x passes unknown ``@task`` keywords to ``task_class``).

This module is imported on Django 5.2 too (``tasks`` modules are autodiscovered): there it
imports cleanly and the backend refuses to be built.
"""

from __future__ import annotations

import builtins
import functools
import logging
import math
import re
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string

from . import registry, validation
from .api import queue
from .backends import get_backend
from .conf import backend_config
from .console import worker_identity
from .context import current_job
from .core.lifecycle import format_traceback, is_retryable
from .core.states import State
from .exceptions import JobCancelled, JobInterrupted, JobTimeout, QueueError
from .records import JobInfo

try:
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:  # Django 5.2: no django.tasks
    AVAILABLE = False
    if not TYPE_CHECKING:

        class _Unavailable:
            """Stands in for django.tasks' classes: building anything from them refuses."""

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                raise ImproperlyConfigured(NEEDS_DJANGO_6)

            def __post_init__(self) -> None:
                raise ImproperlyConfigured(NEEDS_DJANGO_6)

        BaseTaskBackend = Task = _Unavailable
else:
    AVAILABLE = True

__all__ = ["AVAILABLE", "BlameQueueBackend", "BlameQueueTask", "TaskNotRunnable", "TaskStalled"]

logger = logging.getLogger("django_blamequeue.tasks")

NEEDS_DJANGO_6 = (
    f"django_blamequeue.tasks.BlameQueueBackend needs django.tasks (Django 6.0 or later); "
    f"this is Django {'.'.join(str(p) for p in __import__('django').VERSION[:3])}"
)
#: ``worker_ids`` holds one entry per attempt; blamequeue does not store which process ran
#: an earlier attempt, so those read this (the running attempt shows its ``host:pid``).
UNRECORDED_WORKER = "unrecorded"
OPTION_KEYS = frozenset({"BLAMEQUEUE_BACKEND"})

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


class TaskNotRunnable(Exception):
    """No worker could run the task: nothing registered under its name, or a bad payload."""


_REASON_CLASSES = {
    "timeout": f"{JobTimeout.__module__}.{JobTimeout.__qualname__}",
    "cancelled": f"{JobCancelled.__module__}.{JobCancelled.__qualname__}",
    "stalled": f"{__name__}.TaskStalled",
    "bad_job": f"{__name__}.TaskNotRunnable",
}

if TYPE_CHECKING:
    _TaskBase = Task[..., Any]
else:
    _TaskBase = Task


@dataclass(frozen=True, slots=True, kw_only=True)
class BlameQueueTask(_TaskBase):
    """Django's ``Task`` plus the job options ``@task`` may pass: attempts, timeout, dedupe."""

    max_attempts: int | None = None  # None: the job default (DEFAULT_MAX_ATTEMPTS)
    timeout: float | None = None  # seconds per attempt; set with @task only
    dedupe_key: str | None = None  # at most one unfinished run per (queue, key)

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: datetime | None = None,
        backend: str | None = None,
        max_attempts: int | None = None,
        dedupe_key: str | None = None,
    ) -> BlameQueueTask:
        """A copy with other defaults (Django's four, plus ``max_attempts``/``dedupe_key``)."""
        given = {
            "priority": priority,
            "queue_name": queue_name,
            "run_after": run_after,
            "backend": backend,
            "max_attempts": max_attempts,
            "dedupe_key": dedupe_key,
        }
        changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        return replace(self, **changes)


class BlameQueueBackend(BaseTaskBackend):
    task_class = BlameQueueTask
    supports_defer = True
    supports_async_task = True  # coroutines run through Task.call (async_to_sync)
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        where = f"TASKS[{alias!r}]['OPTIONS']"
        if not isinstance(self.options, dict):
            raise ImproperlyConfigured(f"{where} must be a dict")
        if "QUEUES" in self.options:
            raise ImproperlyConfigured(
                f"{where} has QUEUES: Django reads QUEUES next to BACKEND, not in OPTIONS"
            )
        unknown = sorted(set(self.options) - OPTION_KEYS)
        if unknown:
            raise ImproperlyConfigured(
                f"{where} has unknown keys {', '.join(unknown)} (known: {', '.join(OPTION_KEYS)})"
            )
        target = self.options.get("BLAMEQUEUE_BACKEND")
        if target is not None and (not isinstance(target, str) or not target):
            raise ImproperlyConfigured(f"{where}['BLAMEQUEUE_BACKEND'] must be a backend alias")
        self.blamequeue_backend: str | None = target

    # -- validation ------------------------------------------------------------------------
    def validate_task(self, task: Task[..., Any]) -> None:
        """Django's checks (module-level, priority range, QUEUES, aware run_after) and ours;
        a valid task is registered so workers can run it by its module path."""
        super().validate_task(task)
        try:
            validation.queue_name(task.queue_name)
        except QueueError as exc:
            raise InvalidTask(exc.message) from None
        attempts = getattr(task, "max_attempts", None)
        if attempts is not None and (
            not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1
        ):
            raise InvalidTask(f"max_attempts must be a positive int, not {attempts!r}")
        timeout = getattr(task, "timeout", None)
        if timeout is not None and (
            not isinstance(timeout, int | float)
            or isinstance(timeout, bool)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise InvalidTask(f"timeout must be a positive number of seconds, not {timeout!r}")
        key = getattr(task, "dedupe_key", None)
        if key is not None and (not isinstance(key, str) or not key or len(key) > 255):
            raise InvalidTask("dedupe_key must be a non-empty string of ≤255 characters")
        _register(task)

    def check(self, **kwargs: Any) -> list[Any]:

        try:
            backend_config(self.blamequeue_backend)
        except QueueError as exc:
            return [checks.Error(f"TASKS[{self.alias!r}]: {exc.message}", id="blamequeue.E030")]
        return []

    # -- enqueue ---------------------------------------------------------------------------
    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any, Any]:
        """Store the run as a job (in the caller's transaction on a local backend).

        Arguments must be JSON (``TypeError``/``ValueError`` otherwise, nothing stored). With
        a dedupe key that an unfinished run holds, that run's result is answered and
        ``task_enqueued`` is not sent. ``task_enqueued`` is sent after commit.
        """

        self.validate_task(task)
        args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
        run_after = task.run_after
        if run_after is not None and timezone.is_naive(run_after):
            run_after = timezone.make_aware(run_after)
        payload = {
            "args": args,
            "kwargs": kwargs,
            "task": {
                "backend": task.backend,
                "run_after": run_after.isoformat() if run_after else None,
            },
        }
        enq = queue.enqueue(
            task.queue_name,
            payload,
            name=task.module_path,
            run_at=run_after,
            priority=task.priority,
            max_attempts=getattr(task, "max_attempts", None),
            dedupe_key=getattr(task, "dedupe_key", None),
            backend=self.blamequeue_backend,
        )
        info = queue.get_job(enq.job_id, backend=enq.backend)
        if info is None:  # pragma: no cover - the row was just written in this transaction
            raise TaskResultDoesNotExist(enq.job_id)
        result = _result(task, info)
        if not enq.deduplicated:
            sender = type(self)
            transaction.on_commit(
                lambda: _send(task_enqueued, sender, result),
                using=str(getattr(get_backend(enq.backend), "db", "default")),
            )
        return result

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        """The task run's current state; ``TaskResultDoesNotExist`` for no job, or a job
        that is not a task run."""

        info = queue.get_job(result_id, backend=self.blamequeue_backend)
        if info is None:
            raise TaskResultDoesNotExist(result_id)
        return _result(_task_for(info), info)


# -- registration and resolution -----------------------------------------------------------
_tasks: dict[str, Task[..., Any]] = {}
_unresolvable: set[str] = set()


def _register(task: Task[..., Any]) -> None:
    """First sight of a task (its ``@task`` declaration) registers its runner job."""
    name = task.module_path
    if name in _tasks:
        return
    run = functools.wraps(task.func)(lambda payload: _run(name, payload))
    try:
        registry.job(
            queue=task.queue_name,
            name=name,
            max_attempts=getattr(task, "max_attempts", None),
            timeout=getattr(task, "timeout", None),
        )(run)
    except QueueError as exc:
        raise InvalidTask(exc.message) from None
    _tasks[name] = task


def _import_task(name: str) -> Task[..., Any] | None:
    if name in _tasks:
        return _tasks[name]
    if name in _unresolvable or "." not in name:
        return None
    module = name.rsplit(".", 1)[0]
    found: object = None
    # Only code of installed apps is imported by name: a job name is not a licence to
    # import anything on the path.
    if apps.get_containing_app_config(module) is not None:
        try:
            found = import_string(name)
        except ImportError:
            found = None
    if not isinstance(found, Task):
        if len(_unresolvable) < 10_000:
            _unresolvable.add(name)
        return None
    return _tasks.get(name, found)


def _resolve(name: str) -> registry.JobDefinition | None:
    """Registry resolver: a worker that never imported a task's module finds it by path."""
    task = _import_task(name)
    if task is None:
        return None
    try:
        task.get_backend()  # validates, and so registers, when this alias is ours
    except Exception:
        logger.warning("task %s could not be resolved", name, exc_info=True)
        return None
    return registry.registered().get(name)


if AVAILABLE:
    registry.add_resolver(_resolve)


def _task_for(info: JobInfo) -> Task[..., Any]:
    """The task as it was enqueued (priority, queue, run_after, alias, job options)."""
    base = _import_task(info.name)
    if base is None:
        raise TaskResultDoesNotExist(f"{info.job_id} is a job of {info.name!r}, not a task")
    meta = info.payload.get("task", {}) if isinstance(info.payload, dict) else {}
    run_after = meta.get("run_after")
    changes: dict[str, Any] = {
        "priority": info.priority,
        "queue_name": info.queue,
        "backend": meta.get("backend") or base.backend,
        "run_after": parse_datetime(run_after) if isinstance(run_after, str) else None,
    }
    if isinstance(base, BlameQueueTask):
        changes |= {"max_attempts": info.max_attempts, "dedupe_key": info.dedupe_key}
    try:
        return replace(base, **changes)
    except (InvalidTask, ImproperlyConfigured):  # configuration changed since the enqueue
        return base


# -- results -------------------------------------------------------------------------------
def _result(
    task: Task[..., Any], info: JobInfo, *, status: str | None = None, worker: str | None = None
) -> TaskResult[Any, Any]:
    payload = info.payload if isinstance(info.payload, dict) else {}
    status = status or _STATUS[State(info.state)]
    workers = [UNRECORDED_WORKER] * info.attempts
    if worker is not None and workers:
        workers[-1] = worker
    finished = status in ("SUCCESSFUL", "FAILED")
    result = TaskResult(
        task=task,
        id=info.job_id,
        status=TaskResultStatus(status),
        enqueued_at=info.created_at,
        started_at=info.started_at,
        finished_at=info.finished_at if finished else None,
        last_attempted_at=info.started_at,
        args=list(payload.get("args", [])),
        kwargs=dict(payload.get("kwargs", {})),
        backend=task.backend,
        errors=_errors(info),
        worker_ids=workers,
    )
    if status == "SUCCESSFUL":
        object.__setattr__(result, "_return_value", info.result)
    return result


def _errors(info: JobInfo) -> list[TaskError]:
    """The last error kept with the job (blamequeue keeps one), cancellation saying so."""
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
    """The raised exception's class path: from the reason, else the traceback's last line."""
    if info.reason in _REASON_CLASSES:
        return _REASON_CLASSES[info.reason]
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


# -- running (in the worker's slot thread) -------------------------------------------------
def _run(name: str, payload: Any) -> Any:
    """The job handler of a task: ``task_started``, the call, ``task_finished``.

    ``task_finished`` is sent after every attempt; its status is what ``get_result`` answers
    next: SUCCESSFUL, READY when the failure will be retried, FAILED when it will not.
    """

    ctx = current_job()
    info = ctx.backend.get(ctx.job_id)
    if info is None:  # pragma: no cover - we hold its lease
        raise TaskNotRunnable(f"job {ctx.job_id} vanished while leased")
    task = _task_for(info)
    sender = type(task.get_backend())
    result = _result(task, info, status="RUNNING", worker=worker_identity())
    _send(task_started, sender, result)
    if not isinstance(payload, dict):
        raise TaskNotRunnable(f"task payload must be an object, not {type(payload).__name__}")
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    definition = registry.get(name)
    retryable = definition.retryable if definition else None
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        value = normalize_json(value)
    except JobInterrupted as exc:
        if isinstance(exc, JobTimeout | JobCancelled):
            again = isinstance(exc, JobTimeout) and ctx.attempt < ctx.max_attempts
            _finish(result, sender, "READY" if again else "FAILED", _error_of(exc))
        raise
    except BaseException as exc:
        again = ctx.attempt < ctx.max_attempts and is_retryable(exc, retryable)
        _finish(result, sender, "READY" if again else "FAILED", _error_of(exc))
        raise
    object.__setattr__(result, "_return_value", value)
    _finish(result, sender, "SUCCESSFUL", None)
    return value


def _finish(
    result: TaskResult[Any, Any], sender: type[Any], status: str, error: TaskError | None
) -> None:
    object.__setattr__(result, "status", TaskResultStatus(status))
    if status != "READY":
        object.__setattr__(result, "finished_at", timezone.now())
    if error is not None:
        object.__setattr__(result, "errors", [*result.errors, error])
    _send(task_finished, sender, result)
