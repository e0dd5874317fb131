"""The ORM job for django-blamequeue (autodiscovered by ``runworker``)."""

from __future__ import annotations

from typing import Any

from bench.jobs import QUEUE
from bench.ormapp.work import read_write
from django_blamequeue import job

ORM = "bench.orm"


@job(queue=QUEUE, name=ORM, max_attempts=3)
def orm(payload: Any) -> None:
    read_write(int(payload["i"]))
