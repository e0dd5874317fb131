"""The ORM job as a task of Procrastinate's Django integration (``PROCRASTINATE_IMPORT_PATHS``)."""

from __future__ import annotations

from procrastinate.contrib.django import app

from bench.ormapp.work import read_write


@app.task(queue="bench", name="bench.orm")
def orm(i: int) -> None:
    read_write(i)
