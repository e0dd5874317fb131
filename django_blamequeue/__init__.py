"""django-blamequeue: durable background jobs for Django."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .exceptions import (
    ErrorCode,
    JobFailed,
    JobWasCancelled,
    QueueError,
    ResultTimeout,
    Retry,
    Unrecoverable,
)

__all__ = [
    "ABOUT",
    "Child",
    "EnqueuedJob",
    "ErrorCode",
    "JobFailed",
    "JobInfo",
    "JobWasCancelled",
    "QueueError",
    "ResultTimeout",
    "Retry",
    "Unrecoverable",
    "about_key",
    "current_job",
    "flow",
    "job",
    "queue",
]

if TYPE_CHECKING:
    from .api import queue
    from .context import current_job
    from .fanout import Child, flow
    from .origin import ABOUT, about_key
    from .records import EnqueuedJob, JobInfo
    from .registry import job

_LAZY = {
    "queue": ("api", "queue"),
    "job": ("registry", "job"),
    "current_job": ("context", "current_job"),
    "flow": ("fanout", "flow"),
    "Child": ("fanout", "Child"),
    "JobInfo": ("records", "JobInfo"),
    "EnqueuedJob": ("records", "EnqueuedJob"),
    "ABOUT": ("origin", "ABOUT"),
    "about_key": ("origin", "about_key"),
}


def __getattr__(name: str) -> Any:
    """Lazy so that ``import django_blamequeue`` works before Django is set up."""
    if name in _LAZY:
        from importlib import import_module

        module, attr = _LAZY[name]
        return getattr(import_module(f".{module}", __name__), attr)
    raise AttributeError(name)
