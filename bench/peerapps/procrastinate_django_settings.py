"""Django settings of Procrastinate's Django integration (``procrastinate.contrib.django``): the
ORM workload's settings plus its app; the task module is imported by path, nothing is
autodiscovered."""

from __future__ import annotations

from bench.peerapps.orm_peer_settings import *  # noqa: F403

INSTALLED_APPS = ["procrastinate.contrib.django", "bench.ormapp"]
PROCRASTINATE_AUTODISCOVER_MODULE_NAME = ""
PROCRASTINATE_IMPORT_PATHS = ["bench.peerapps.procrastinate_django_tasks"]
