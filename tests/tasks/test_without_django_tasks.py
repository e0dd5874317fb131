"""On Django 5.2 (no ``django.tasks``) the module imports, and the backend refuses to be built.

``tasks`` modules are autodiscovered, so ``django_blamequeue.tasks`` is imported on every
supported Django. A subprocess hides ``django.tasks`` the way Django 5.2 lacks it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import importlib.abc, sys

class NoDjangoTasks(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "django.tasks" or name.startswith("django.tasks."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, NoDjangoTasks())
import django
django.setup()  # autodiscovers django_blamequeue.tasks
import django_blamequeue.tasks as tasks
from django.core.exceptions import ImproperlyConfigured
assert "django_blamequeue.tasks" in sys.modules and tasks.AVAILABLE is False
try:
    tasks.BlameQueueBackend("default", {})
except ImproperlyConfigured as exc:
    print("refused:", exc)
"""


def test_the_module_imports_and_the_backend_refuses_without_django_tasks() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "refused: django_blamequeue.tasks.BlameQueueBackend needs django.tasks" in done.stdout
