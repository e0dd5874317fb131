"""Tasks as jobs: registering a ``@task`` as the job that runs it, finding a task by its
module path, and running it in a worker's slot thread (Django's task signals around it)."""

from __future__ import annotations

import functools
import logging
from dataclasses import replace
from typing import Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string

from django_blamequeue.context import current_job
from django_blamequeue.core.records import JobInfo
from django_blamequeue.core.retry import is_retryable
from django_blamequeue.exceptions import JobCancelled, JobInterrupted, JobTimeout, QueueError
from django_blamequeue.jobs import registry
from django_blamequeue.tasks import attempts
from django_blamequeue.tasks.compat import (
    AVAILABLE,
    InvalidTask,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_finished,
    task_started,
)
from django_blamequeue.tasks.results import TaskNotRunnable, _error_of, _result, _send
from django_blamequeue.tasks.task import TASK_OPTIONS, BlameQueueTask
from django_blamequeue.worker.progress import worker_identity

logger = logging.getLogger("django_blamequeue.tasks")

# ----------------------------------------------------------
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
        # The task's own options as enqueued (None stays None: the job's defaults filled in
        # the job, not the task), so get_result's task equals the one enqueue answered.
        options = meta.get("options")
        if isinstance(options, dict):
            changes |= {k: options.get(k) for k in TASK_OPTIONS}
        else:  # a run enqueued before the options were stored
            changes |= {"max_attempts": info.max_attempts, "dedupe_key": info.dedupe_key}
    try:
        return replace(base, **changes)
    except (InvalidTask, ImproperlyConfigured):  # configuration changed since the enqueue
        return base


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
    alias = ctx.backend.alias
    attempts.started(
        alias, ctx.job_id, ctx.attempt, worker_identity(), info.started_at or timezone.now()
    )
    result = _result(task, info, attempts.of(alias, ctx.job_id), status="RUNNING")
    _send(task_started, sender, result)
    if not isinstance(payload, dict):
        raise TaskNotRunnable(f"task payload must be an object, not {type(payload).__name__}")
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    definition = registry.get(name)
    retryable = definition.options.retryable if definition else None
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
    """Record the attempt's end, then tell ``task_finished`` (per attempt: READY while the
    failure will be retried)."""
    ctx = current_job()
    attempts.ended(ctx.backend.alias, ctx.job_id, ctx.attempt, error)
    _report(result, sender, status, error)


def _report(
    result: TaskResult[Any, Any], sender: type[Any], status: str, error: TaskError | None
) -> None:
    object.__setattr__(result, "status", TaskResultStatus(status))
    if status != "READY":
        object.__setattr__(result, "finished_at", timezone.now())
    if error is not None:
        object.__setattr__(result, "errors", [*result.errors, error])
    _send(task_finished, sender, result)
