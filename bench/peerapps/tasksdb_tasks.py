"""The no-op ``django.tasks`` task of the django-tasks-db contender (imported after setup)."""

from __future__ import annotations

from django.tasks import task


@task(queue_name="bench")
def noop(i: int) -> None:
    return None


@task(queue_name="bench")
def stamped(t: float, p: int) -> None:
    from bench.peerapps.probe import started

    started(t, p)
