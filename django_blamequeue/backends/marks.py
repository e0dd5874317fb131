"""Completion marks: an atomic job's effects, fenced where its ack cannot join the transaction.

On the redis backend the ack is a Lua script: it cannot commit with the handler's writes in a
Django database. So the handler's transaction also inserts one ``EffectMark`` row per job id
(rule: effects-once). The first run to commit its mark owns the job's effects; any other run of
the same job (a redelivery after a lost ack, a worker that stalled past its lease) finds the
mark, rolls its own writes back and completes the job with the first run's result.

``INSERT … ON CONFLICT DO NOTHING RETURNING``: on PostgreSQL a mark being inserted by another
open transaction makes this one wait for it (then answer "already" if it committed); nothing
here raises ``IntegrityError``, which would poison the caller's transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connections
from django.utils import timezone

from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import Ack, EffectsFence
from django_blamequeue.models import EffectMark

TABLE = EffectMark._meta.db_table
_COLUMNS = "job_id, backend, attempt, token, result, content_type, content_encoding, created_at"
INSERT = (
    f"INSERT INTO {TABLE} ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (job_id) DO NOTHING RETURNING job_id"
)


def mark(
    database: str, alias: str, ack: Ack, attempt: int, now: datetime | None = None
) -> EffectsFence:
    """Insert ``ack``'s completion mark in the open transaction on ``database``: "marked",
    or "already" with the result of the run whose mark is there."""
    connection = connections[database]
    result: Encoded | None = ack.transition.result
    values: list[Any] = [
        ack.job_id,
        alias,
        attempt,
        ack.token,
        result.body if result is not None else None,
        result.content_type if result is not None else "application/json",
        result.content_encoding if result is not None else "utf-8",
        connection.ops.adapt_datetimefield_value(now or timezone.now()),
    ]
    with connection.cursor() as cur:
        cur.execute(INSERT, values)
        if cur.fetchone() is not None:
            return EffectsFence(kind="marked")
    first = EffectMark.objects.using(database).get(job_id=ack.job_id)
    earlier = (
        Encoded(first.content_type, first.content_encoding, bytes(first.result))
        if first.result is not None
        else None
    )
    return EffectsFence(kind="already", result=earlier, attempt=first.attempt)


def prune(database: str, alias: str, before: datetime, limit: int = 5000) -> int:
    """Forget backend ``alias``'s marks older than ``before`` (the done jobs' retention): a
    job done that long ago is not delivered again (a DLQ retry of a job that failed after
    its effects committed would run them again: docs/effects.md)."""
    marks = EffectMark.objects.using(database).filter(backend=alias)
    ids = list(marks.filter(created_at__lt=before).values_list("job_id", flat=True)[:limit])
    if not ids:
        return 0
    deleted, _ = marks.filter(job_id__in=ids).delete()
    return deleted
