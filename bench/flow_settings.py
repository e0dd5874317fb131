"""Settings of the flow benchmark (``bench/flows.py``): ``bench.settings`` plus its flow jobs."""

from __future__ import annotations

from bench.settings import *  # noqa: F403
from bench.settings import INSTALLED_APPS as _APPS

INSTALLED_APPS = [*_APPS, "bench.flowapp"]
