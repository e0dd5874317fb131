"""django-blamequeue: durable background jobs for Django."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_blamequeue.exceptions import (
    ChildFailed,
    ErrorCode,
    JobFailed,
    JobWasCancelled,
    NonDeterministicWorkflow,
    QueueError,
    ResultTimeout,
    Retry,
    Snooze,
    Unrecoverable,
    WaitTimeout,
)

__all__ = [
    "ABOUT",
    "BaseJob",
    "Child",
    "ChildFailed",
    "EnqueuedJob",
    "ErrorCode",
    "JobEvent",
    "JobFailed",
    "JobInfo",
    "JobWasCancelled",
    "NonDeterministicWorkflow",
    "QueueError",
    "QueueLimits",
    "ResultTimeout",
    "Retry",
    "Snooze",
    "Unique",
    "Unrecoverable",
    "WaitTimeout",
    "WorkerInfo",
    "about_key",
    "current_job",
    "flow",
    "job",
    "periodic",
    "queue",
    "workflow",
]

if TYPE_CHECKING:
    from django_blamequeue.api import queue
    from django_blamequeue.context import current_job
    from django_blamequeue.core.controls import QueueLimits, WorkerInfo
    from django_blamequeue.core.records import EnqueuedJob, JobInfo
    from django_blamequeue.core.unique import Unique
    from django_blamequeue.jobs.events import JobEvent
    from django_blamequeue.jobs.flows import Child, flow
    from django_blamequeue.jobs.hooks import BaseJob
    from django_blamequeue.jobs.origin import ABOUT, about_key
    from django_blamequeue.jobs.registry import job, periodic, workflow

_LAZY = {
    "queue": ("api", "queue"),
    "job": ("jobs.registry", "job"),
    "workflow": ("jobs.registry", "workflow"),
    "periodic": ("jobs.registry", "periodic"),
    "current_job": ("context", "current_job"),
    "flow": ("jobs.flows", "flow"),
    "Child": ("jobs.flows", "Child"),
    "BaseJob": ("jobs.hooks", "BaseJob"),
    "JobEvent": ("jobs.events", "JobEvent"),
    "JobInfo": ("core.records", "JobInfo"),
    "EnqueuedJob": ("core.records", "EnqueuedJob"),
    "QueueLimits": ("core.controls", "QueueLimits"),
    "WorkerInfo": ("core.controls", "WorkerInfo"),
    "Unique": ("core.unique", "Unique"),
    "ABOUT": ("jobs.origin", "ABOUT"),
    "about_key": ("jobs.origin", "about_key"),
}


#: Modules that moved into a feature package, by their old name: still importable with
#: ``from django_blamequeue import metrics`` (with a ``DeprecationWarning``).
_MOVED = {
    "metrics": "observability.metrics",
    "tracing": "observability.tracing",
    "schedules": "core.schedules",
}


def __getattr__(name: str) -> Any:
    """Lazy so that ``import django_blamequeue`` works before Django is set up."""
    from importlib import import_module

    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(import_module(f".{module}", __name__), attr)
    if name in _MOVED:
        import warnings

        warnings.warn(
            f"django_blamequeue.{name} moved to django_blamequeue.{_MOVED[name]}",
            DeprecationWarning,
            stacklevel=2,
        )
        return import_module(f".{_MOVED[name]}", __name__)
    raise AttributeError(name)
