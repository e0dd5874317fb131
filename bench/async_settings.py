"""Settings of the async benchmark (``bench/async_jobs.py``): ``bench.settings`` plus its job."""

from __future__ import annotations

from bench.settings import *  # noqa: F403
from bench.settings import INSTALLED_APPS as _APPS

INSTALLED_APPS = [*_APPS, "bench.asyncapp"]
