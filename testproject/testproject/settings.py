"""Settings of the demo and test project.

SQLite (embedded, no server) by default; PostgreSQL when ``DATABASE_URL`` is set, e.g.
``postgres://user:password@127.0.0.1:5432/blamequeue``.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "blamequeue-demo-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_blamequeue",
    "demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "testproject.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def database_from_url(url: str) -> dict[str, object]:
    """A ``DATABASES`` entry from ``postgres://user:pw@host:port/name`` or ``sqlite:///path``."""
    parsed = urlparse(url)
    if parsed.scheme in ("postgres", "postgresql"):
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            "CONN_MAX_AGE": 0,
        }
    if parsed.scheme == "sqlite":
        return sqlite_database(Path(parsed.path))
    raise ValueError(f"unsupported DATABASE_URL scheme {parsed.scheme!r}")


def sqlite_database(path: Path) -> dict[str, object]:
    # IMMEDIATE: a write transaction takes the write lock at BEGIN, so several worker
    # processes queue up on the busy timeout instead of failing a lock upgrade.
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 30},
    }


DATABASES = {
    "default": database_from_url(os.environ["DATABASE_URL"])
    if os.environ.get("DATABASE_URL")
    else sqlite_database(BASE_DIR / "db.sqlite3")
}

AUTH_PASSWORD_VALIDATORS: list[dict[str, str]] = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

BLAMEQUEUE = {
    "BACKENDS": {"default": {"PROTOCOL": "local"}},
    "DEFAULT_BACKEND": "default",
    "SERIALIZER": "json",
    "ACCEPT_CONTENT": ["json"],
    "AUDIT": "operations",
    "BACKOFF_BASE": 0.5,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "job": {
            "format": "%(asctime)s %(levelname)s %(name)s "
            "[%(job_id)s %(queue)s #%(attempt)s] %(message)s"
        },
    },
    "filters": {"job": {"()": "django_blamequeue.context.JobContextFilter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "job", "filters": ["job"]}
    },
    "loggers": {
        "django_blamequeue": {"handlers": ["console"], "level": "WARNING", "propagate": False}
    },
}
