"""Django settings of the peers' ORM workload (the peers' venv; ``BENCH_ORM_DATABASE_URL``).

Only the ORM workload's app (``bench/ormapp``) on PostgreSQL, Django's default database
settings (``CONN_MAX_AGE=0``), DEBUG off. Celery's worker loads it through its Django fix-up
(``DJANGO_SETTINGS_MODULE`` in the worker's environment); Procrastinate's Django integration
adds its app (``procrastinate_django_settings``).
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

SECRET_KEY = "blamequeue-bench-not-secret"
DEBUG = False  # DEBUG=True would keep every query in memory
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["bench.ormapp"]

_url = urlparse(os.environ.get("BENCH_ORM_DATABASE_URL", "postgres://localhost/orm"))
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
