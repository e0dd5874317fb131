"""``db_worker`` subprocesses of django-tasks-db, for the crash comparison."""

from __future__ import annotations

from tests.tasks.config import reference_tasks
from tests.tasks.worker_settings import *  # noqa: F403
from tests.tasks.worker_settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]
TASKS = reference_tasks()
