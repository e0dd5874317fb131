"""Re-encrypting a job table's stored payloads, results, error text and checkpoints with the
newest key (the local backend, the SQS ledger).

One batch is one read and one ``UPDATE … FROM (VALUES …)``: each row is rewritten only if it
still holds everything that was read (compare-and-set on its state, attempt count and every
sealed column) and is not inflight: a worker's ack, a retry or
a replacing enqueue that lands between the read and the write wins, and the row keeps the
ciphertext it wrote, which a listed key still opens. A kill -9 between two rows leaves each
row either old or new, never half. The job's kept attempts (their error text) are re-sealed in
the same transaction; they never change once written, so their own text is their fence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db import transaction

from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import KeyRotation
from django_blamequeue.core.states import State
from django_blamequeue.models import JobAttempt

#: What ``rotate`` is given: a stored payload to its re-encrypted form, a stored text likewise.
Rewrite = Callable[[Encoded], Encoded]
RewriteText = Callable[[str | None], str | None]
#: The rewritten ids to how many of them keep an old copy elsewhere (SQS: a sent message).
LeftOld = Callable[[Sequence[str]], int]

_FIELDS = (
    "id",
    "state",
    "attempts",
    "payload",
    "content_type",
    "content_encoding",
    "result",
    "error",
    "traceback",
    "checkpoint",
)


def rotate(
    table: JobTable,
    payload: Rewrite,
    text: RewriteText,
    *,
    after: str = "",
    limit: int = 500,
    left_old: LeftOld | None = None,
) -> KeyRotation:
    """Up to ``limit`` encrypted rows with ids after ``after``, in id order, rewritten."""
    rows = list(
        table.jobs()
        .filter(id__gt=after, content_encoding__startswith="fernet+")
        .exclude(state=State.INFLIGHT)
        .order_by("id")
        .values_list(*_FIELDS)[:limit]
    )
    changed: list[list[Any]] = []
    for job_id, state, attempts, body, ctype, cenc, result, error, trace, cp in rows:
        new = payload(Encoded(ctype, cenc, bytes(body)))
        if new.body == bytes(body):
            continue  # no key opens it: left for its key to come back
        old_result = None if result is None else bytes(result)
        new_result = None if old_result is None else payload(Encoded(ctype, cenc, old_result)).body
        as_read = [job_id, state, attempts, bytes(body), old_result, error, trace, cp]
        changed.append([*as_read, new.body, new_result, text(error), text(trace), text(cp)])
    done: list[str] = []
    with transaction.atomic(using=table.db):
        if changed:
            with table.connection.cursor() as cur:
                cur.execute(rewrite_many(table, len(changed)), [v for r in changed for v in r])
                done = [r[0] for r in cur.fetchall()]
        _attempts(table, done, text)
    last = rows[-1][0] if rows else None
    left = left_old(done) if left_old is not None and done else 0
    return KeyRotation(seen=len(rows), rewritten=len(done), last_id=last, left_old=left)


def rewrite_many(table: JobTable, n: int) -> str:
    """One statement for ``n`` jobs, params per job: id, state, attempts, then payload,
    result, error, traceback and checkpoint as read, then the same five re-sealed. rule: a
    job is rewritten only if it is not inflight and holds every value as read (a NULL
    matches a NULL); answers the ids rewritten."""
    t = table.name
    if table.is_postgres:
        kinds = ["varchar", "varchar", "integer"] + ["bytea", "bytea", "text", "text", "text"] * 2
        row = "(" + ", ".join(f"%s::{k}" for k in kinds) + ")"
        alias = "v(" + ", ".join(f"column{i}" for i in range(1, 14)) + ")"
        same = "IS NOT DISTINCT FROM"
    else:
        row, alias, same = "(" + ", ".join(["%s"] * 13) + ")", "v", "IS"
    return (
        f"UPDATE {t} SET payload = v.column9, result = v.column10, error = v.column11, "
        f"traceback = v.column12, checkpoint = v.column13 "
        f"FROM (VALUES {', '.join([row] * n)}) AS {alias} "
        f"WHERE {t}.id = v.column1 AND {t}.state = v.column2 AND {t}.state <> 'inflight' "
        f"AND {t}.attempts = v.column3 AND {t}.payload = v.column4 "
        f"AND {t}.result {same} v.column5 AND {t}.error {same} v.column6 "
        f"AND {t}.traceback {same} v.column7 AND {t}.checkpoint {same} v.column8 "
        f"RETURNING {t}.id"
    )


def _attempts(table: JobTable, job_ids: Sequence[str], text: RewriteText) -> None:
    """The kept attempts of the rewritten jobs, their error text re-sealed (one read)."""
    if not job_ids:
        return
    kept = JobAttempt.objects.using(table.db).filter(backend=table.alias, job_id__in=job_ids)
    for pk, error, trace in kept.values_list("pk", "error", "traceback"):
        new_error, new_trace = text(error), text(trace)
        if (new_error, new_trace) != (error, trace):
            kept.filter(pk=pk, error=error, traceback=trace).update(
                error=new_error, traceback=new_trace
            )
