"""Test settings: the demo project, a file SQLite database and (when running) PostgreSQL.

``make test`` starts a throwaway PostgreSQL and exports ``BLAMEQUEUE_TEST_POSTGRES_URL``; the
``postgres`` database alias and backend exist only then. Worker subprocesses started by the
process tests set ``BLAMEQUEUE_TEST_SUBPROCESS=1`` and connect straight to the test databases
that pytest-django created; ``BLAMEQUEUE_TEST_OVERRIDES`` (JSON) adds ``BLAMEQUEUE`` keys
for them, e.g. a short ``SWEEP_INTERVAL`` for a chaos test.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "testproject"))

from testproject.settings import *  # noqa: E402, F403
from testproject.settings import INSTALLED_APPS as _APPS  # noqa: E402
from testproject.settings import database_from_url, sqlite_database  # noqa: E402

INSTALLED_APPS = [*_APPS, "tests.procapp"]

TMP = Path(os.environ.get("BLAMEQUEUE_TEST_TMP", ROOT / ".tmp"))
TMP.mkdir(parents=True, exist_ok=True)
os.environ.setdefault("BLAMEQUEUE_TEST_SQLITE", str(TMP / f"test-{os.getpid()}.sqlite3"))
SQLITE_TEST_NAME = os.environ["BLAMEQUEUE_TEST_SQLITE"]
SUBPROCESS = os.environ.get("BLAMEQUEUE_TEST_SUBPROCESS") == "1"
POSTGRES_URL = os.environ.get("BLAMEQUEUE_TEST_POSTGRES_URL", "")

_sqlite = sqlite_database(Path(SQLITE_TEST_NAME if SUBPROCESS else TMP / "unused.sqlite3"))
_sqlite["TEST"] = {"NAME": SQLITE_TEST_NAME}
# Workers keep their connections, as a production worker would (checked before reuse).
PERSISTENT = {"CONN_MAX_AGE": 600, "CONN_HEALTH_CHECKS": True} if SUBPROCESS else {}
_sqlite.update(PERSISTENT)
DATABASES = {"default": _sqlite}
BACKENDS: dict[str, dict[str, object]] = {"default": {"PROTOCOL": "local", "DATABASE": "default"}}
if POSTGRES_URL:
    _pg = database_from_url(POSTGRES_URL)
    _pg["NAME"] = "blamequeue"
    _pg["TEST"] = {"NAME": "test_blamequeue"}
    if SUBPROCESS:
        _pg["NAME"] = "test_blamequeue"
        _pg.update(PERSISTENT)
    DATABASES["postgres"] = _pg
    # Claims always read from the start here (a claim slowed by a busy test machine would
    # otherwise start after its last job); tests/backends/test_pinned_horizon.py turns it on.
    BACKENDS["postgres"] = {
        "PROTOCOL": "local",
        "DATABASE": "postgres",
        "CLAIM_ONWARD_AFTER_MS": None,
    }

# Redis and SQS (moto_server) exist only when `make test` started them.
REDIS_URL = os.environ.get("BLAMEQUEUE_TEST_REDIS_URL", "")
REDIS_CLUSTER_URL = os.environ.get("BLAMEQUEUE_TEST_REDIS_CLUSTER_URL", "")
SQS_URL = os.environ.get("BLAMEQUEUE_TEST_SQS_URL", "")
# Each test process (and its workers) gets its own key prefix / queue prefix, so two runs on one
# server never meet.
_RUN = os.environ.setdefault("BLAMEQUEUE_TEST_RUN", f"t{os.getpid()}")
if REDIS_URL:
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "redis": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient"},
        },
    }
    BACKENDS["redis"] = {"PROTOCOL": "redis", "CONNECTION": "redis", "KEY_PREFIX": f"bq-{_RUN}"}
if REDIS_CLUSTER_URL:
    BACKENDS["redis-cluster"] = {
        "PROTOCOL": "redis",
        "URL": REDIS_CLUSTER_URL,
        "CLUSTER": True,
        "KEY_PREFIX": f"bqc-{_RUN}",
    }
if SQS_URL:
    BACKENDS["sqs"] = {
        "PROTOCOL": "sqs",
        "REGION": "us-east-1",
        "ENDPOINT_URL": SQS_URL,
        "QUEUE_PREFIX": f"bq-{_RUN}-",
        "ACCESS_KEY_ID": "testing",
        "SECRET_ACCESS_KEY": "testing",
        # The ledger's database: "default" (SQLite), or e.g. "postgres" to run the suite on it.
        "DATABASE": os.environ.get("BLAMEQUEUE_TEST_SQS_DATABASE", "default"),
    }

# Engines from elsewhere under test (pytest --blamequeue-engine; docs/writing-a-backend.md), for
# worker subprocesses: tests/conftest.py adds them to the pytest process's settings itself.
BACKENDS.update(json.loads(os.environ.get("BLAMEQUEUE_TEST_ENGINES") or "{}"))

BLAMEQUEUE = {
    "BACKENDS": BACKENDS,
    "DEFAULT_BACKEND": "default",
    "AUDIT": "operations",
    **json.loads(os.environ.get("BLAMEQUEUE_TEST_OVERRIDES") or "{}"),
}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGGING: dict[str, object] = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"django_blamequeue": {"level": "WARNING"}},
}
if SUBPROCESS:  # worker stderr, read by the process tests: timestamped, one line per record
    LOGGING["formatters"] = {"ts": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}}
    LOGGING["handlers"] = {"stderr": {"class": "logging.StreamHandler", "formatter": "ts"}}
    LOGGING["loggers"] = {
        "django_blamequeue": {"level": "WARNING", "handlers": ["stderr"], "propagate": False}
    }
