"""Settings of ``runworker`` subprocesses in the django.tasks tests.

``tests.tasks`` is an installed app here, so the worker resolves ``tests.tasks.sample`` tasks by
their module path (nothing imports that module for it). The sweeper runs often so an expired
lease is rescued within a second.
"""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import BLAMEQUEUE, INSTALLED_APPS
from tests.tasks.config import tasks_setting

INSTALLED_APPS = [*INSTALLED_APPS, "tests.tasks"]
TASKS = tasks_setting()
BLAMEQUEUE = {**BLAMEQUEUE, "SWEEP_INTERVAL": 0.2, "BACKOFF_BASE": 0.05}
