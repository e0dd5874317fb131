"""TASKS for the django.tasks tests, shared by the test process and worker subprocesses."""

from __future__ import annotations

import os
from typing import Any

QUEUES = ["default", "tasks", "other", "crash"]


def tasks_setting(blamequeue_backend: str | None = None) -> dict[str, dict[str, Any]]:
    """``TASKS`` with the ``blamequeue`` alias on ``blamequeue_backend`` (None: the default)."""
    target = blamequeue_backend or os.environ.get("BLAMEQUEUE_TEST_TASKS_BACKEND") or None
    return {
        "default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
        "blamequeue": {
            "BACKEND": "django_blamequeue.tasks.BlameQueueBackend",
            "QUEUES": QUEUES,
            "OPTIONS": {"BLAMEQUEUE_BACKEND": target} if target else {},
        },
    }


def reference_tasks() -> dict[str, dict[str, Any]]:
    """``tasks_setting()`` plus django-tasks-db's backend as ``reference``."""
    return {
        **tasks_setting(),
        "reference": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["crash"]},
    }
