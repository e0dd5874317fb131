"""Django settings of the django-tasks-db contender (the peers' venv; ``BENCH_TASKSDB_URL``).

Django's own ``django.tasks`` with ``django_tasks_db.DatabaseBackend`` on PostgreSQL, DEBUG off.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

SECRET_KEY = "blamequeue-bench-not-secret"
DEBUG = False  # DEBUG=True would keep every query in memory (and turn on db_worker --reload)
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django_tasks_db"]

_url = urlparse(os.environ.get("BENCH_TASKSDB_URL", "postgres://localhost/tasksdb"))
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(_url.path.lstrip("/")),
        "USER": unquote(_url.username or ""),
        "PASSWORD": unquote(_url.password or ""),
        "HOST": _url.hostname or "",
        "PORT": str(_url.port or ""),
    }
}

TASKS = {
    "default": {
        "BACKEND": "django_tasks_db.DatabaseBackend",
        "QUEUES": ["bench"],
    }
}
