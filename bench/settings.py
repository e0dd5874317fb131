"""Django settings for the benchmark's processes (the driver and its ``runworker`` children).

The database comes from ``BENCH_DATABASE_URL``: ``postgres://user@host:port/name`` or
``sqlite:////abs/path.sqlite3``. With ``BENCH_REDIS_URL`` the backend is redis instead (the
database then holds only audit and outbox rows). SQLite is configured exactly like
``testproject`` (rollback journal, ``IMMEDIATE`` write transactions, 30 s busy timeout);
PostgreSQL runs with fsync on.
Library settings are the defaults (``AUDIT = "operations"``: the happy path writes no audit
rows), JSON payloads.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

SECRET_KEY = "blamequeue-bench-not-secret"
DEBUG = False  # DEBUG=True would keep every query in memory
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django_blamequeue",
    "bench",
]


def _database(url: str) -> dict[str, object]:
    parsed = urlparse(url)
    if parsed.scheme in ("postgres", "postgresql"):
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")),
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
        }
    if parsed.scheme == "sqlite":
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(Path(parsed.path)),
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 30},
        }
    raise ValueError(f"unsupported BENCH_DATABASE_URL {url!r}")


DATABASES = {"default": _database(os.environ["BENCH_DATABASE_URL"])}
# A lever tried from the outside (``--server-binding`` of bench/ceiling.py and bench/orm.py):
# psycopg's server-side binding, each statement prepared on its 5th run on a connection.
if os.environ.get("BENCH_SERVER_BINDING") == "1" and "postgresql" in str(
    DATABASES["default"]["ENGINE"]
):
    DATABASES["default"]["OPTIONS"] = {"server_side_binding": True, "prepare_threshold": 5}

# BENCH_APPLICATION_NAME names the sessions (bench/pressure.py terminates the workers' by it).
if os.environ.get("BENCH_APPLICATION_NAME") and "postgresql" in str(DATABASES["default"]["ENGINE"]):
    DATABASES["default"]["OPTIONS"] = {
        **DATABASES["default"].get("OPTIONS", {}),
        "application_name": os.environ["BENCH_APPLICATION_NAME"],
    }

# With BENCH_REDIS_URL the jobs live in Redis (the database keeps audit and outbox rows).
_REDIS_URL = os.environ.get("BENCH_REDIS_URL", "")
_BACKEND = (
    {"PROTOCOL": "redis", "URL": _REDIS_URL, "KEY_PREFIX": "bench"}
    if _REDIS_URL
    else {"PROTOCOL": "local"}
)
# BENCH_LISTEN=0: workers poll instead of LISTENing (bench/latency.py's wake-up experiment).
if os.environ.get("BENCH_LISTEN") == "0" and not _REDIS_URL:
    _BACKEND["LISTEN"] = False

BLAMEQUEUE = {
    "BACKENDS": {"default": _BACKEND},
    "DEFAULT_BACKEND": "default",
    "SERIALIZER": "json",
    "ACCEPT_CONTENT": ["json"],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_blamequeue": {"handlers": ["console"], "level": "WARNING"}},
}
