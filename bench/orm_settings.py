"""Settings of the ORM workload (``bench/orm.py``, ``bench/soak.py``, ``bench/ceiling.py``):
``bench.settings`` plus the ``bench.ormapp`` tables and job.

``BENCH_CONN_MAX_AGE`` sets the database's ``CONN_MAX_AGE``: unset or ``0`` is Django's
default (a connection per request, here per job), ``none`` keeps connections for good, a
number is seconds. ``BENCH_DB_POOL=1`` turns on Django's psycopg connection pool
(``OPTIONS["pool"]``: 4 to 20 connections per process, enough for 10 slots and the worker's own;
needs ``psycopg_pool``; ``CONN_MAX_AGE`` must then be 0).
"""

from __future__ import annotations

import os

from bench.settings import *  # noqa: F403
from bench.settings import DATABASES as _DATABASES
from bench.settings import INSTALLED_APPS as _APPS

INSTALLED_APPS = [*_APPS, "bench.ormapp"]


def _conn_max_age(raw: str) -> int | None:
    return None if raw.strip().lower() == "none" else int(float(raw or "0"))


DATABASES = {"default": {**_DATABASES["default"]}}
DATABASES["default"]["CONN_MAX_AGE"] = _conn_max_age(os.environ.get("BENCH_CONN_MAX_AGE", "0"))
if os.environ.get("BENCH_DB_POOL") == "1":
    DATABASES["default"]["OPTIONS"] = {
        **DATABASES["default"].get("OPTIONS", {}),
        "pool": {"min_size": 4, "max_size": 20},
    }
