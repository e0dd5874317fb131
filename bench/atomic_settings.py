"""Settings of the atomic-mix benchmark (``bench/atomic_mix.py``): ``bench.settings`` plus its
jobs."""

from __future__ import annotations

from bench.settings import *  # noqa: F403
from bench.settings import INSTALLED_APPS as _APPS

INSTALLED_APPS = [*_APPS, "bench.atomicapp"]
