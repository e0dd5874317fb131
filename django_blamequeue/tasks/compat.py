"""django.tasks as this backend uses it — or, on Django 5.2 (which has no django.tasks),
stand-ins that refuse to be built, so the package imports cleanly there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

NEEDS_DJANGO_6 = (
    f"django_blamequeue.tasks.BlameQueueBackend needs django.tasks (Django 6.0 or later); "
    f"this is Django {'.'.join(str(p) for p in __import__('django').VERSION[:3])}"
)

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

        BaseTaskBackend = Task = TaskContext = TaskError = TaskResult = _Unavailable
        TaskResultStatus = InvalidTask = TaskResultDoesNotExist = _Unavailable
        task_enqueued = task_finished = task_started = normalize_json = _Unavailable
else:
    AVAILABLE = True

__all__ = [
    "AVAILABLE",
    "NEEDS_DJANGO_6",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task_enqueued",
    "task_finished",
    "task_started",
]
