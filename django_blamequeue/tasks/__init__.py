"""A ``django.tasks`` backend (docs/django-tasks.md): ``@task`` functions run as blamequeue jobs.

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

import logging
from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone

from django_blamequeue.api import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.conf import backend_config
from django_blamequeue.core import validation
from django_blamequeue.core.options import CALL_OPTIONS
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.tasks import attempts
from django_blamequeue.tasks.compat import (
    AVAILABLE,
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    normalize_json,
    task_enqueued,
)
from django_blamequeue.tasks.results import TaskNotRunnable, TaskStalled, _result, _send
from django_blamequeue.tasks.running import _register, _task_for
from django_blamequeue.tasks.task import TASK_OPTIONS, BlameQueueTask, job_options

logger = logging.getLogger("django_blamequeue.tasks")

__all__ = ["AVAILABLE", "BlameQueueBackend", "BlameQueueTask", "TaskNotRunnable", "TaskStalled"]

OPTION_KEYS = frozenset({"BLAMEQUEUE_BACKEND"})


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
        try:
            job_options(task).check_defaults(quote=True)
        except QueueError as exc:
            raise InvalidTask(exc.message) from None
        _register(task)

    def check(self, **kwargs: Any) -> list[Any]:
        """E030 for a ``BLAMEQUEUE_BACKEND`` that is not configured. Invalid settings are
        left to ``check_settings``, which reports each problem once under its own id."""
        try:
            backend_config(self.blamequeue_backend)
        except QueueError as exc:
            if exc.code != ErrorCode.UNKNOWN_BACKEND:
                return []
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
                "options": {k: getattr(task, k, None) for k in TASK_OPTIONS},
            },
        }
        enq = queue.enqueue(
            task.queue_name,
            payload,
            name=task.module_path,
            run_at=run_after,
            priority=task.priority,
            backend=self.blamequeue_backend,
            **{k: getattr(task, k, None) for k in TASK_OPTIONS if k in CALL_OPTIONS},
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
        """The task run's current state; ``TaskResultDoesNotExist`` for no job, a job that
        is not a task run, or an id that cannot be one (``""``, a number)."""
        try:
            info = queue.get_job(result_id, backend=self.blamequeue_backend)
        except QueueError as exc:
            if exc.code != ErrorCode.BAD_ARGUMENT:
                raise
            raise TaskResultDoesNotExist(result_id) from None
        if info is None:
            raise TaskResultDoesNotExist(result_id)
        return _result(_task_for(info), info, attempts.of(info.backend, info.job_id))
