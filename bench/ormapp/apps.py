"""App config of the ORM workload (label ``bench_orm``: tables ``bench_orm_*``)."""

from __future__ import annotations

from django.apps import AppConfig


class OrmBenchConfig(AppConfig):
    name = "bench.ormapp"
    label = "bench_orm"
    default_auto_field = "django.db.models.BigAutoField"
