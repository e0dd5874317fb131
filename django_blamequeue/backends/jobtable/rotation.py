"""Re-encrypting a job table's stored payloads, results and error text with the newest key.

Each row is rewritten only if it still holds what was read (compare-and-set on the payload)
and is not inflight: a job claimed meanwhile keeps its ciphertext, which every configured key
still opens, and a kill -9 between two rows leaves each row either old or new, never half.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction

from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import KeyRotation
from django_blamequeue.core.states import State

#: What ``rotate`` is given: a stored payload to its re-encrypted form, a stored text likewise.
Rewrite = Callable[[Encoded], Encoded]
RewriteText = Callable[[str | None], str | None]


def rotate(
    table: JobTable,
    payload: Rewrite,
    text: RewriteText,
    *,
    after: str = "",
    limit: int = 500,
) -> KeyRotation:
    """Up to ``limit`` encrypted rows with ids after ``after``, in id order, rewritten."""
    fields = ("id", "payload", "content_type", "content_encoding", "result", "error", "traceback")
    rows = list(
        table.jobs()
        .filter(id__gt=after, content_encoding__startswith="fernet+")
        .exclude(state=State.INFLIGHT)
        .order_by("id")
        .values_list(*fields)[:limit]
    )
    rewritten = 0
    with transaction.atomic(using=table.db):
        for job_id, body, ctype, cenc, result, error, trace in rows:
            new = payload(Encoded(ctype, cenc, bytes(body)))
            if new.body == bytes(body):
                continue  # no key opens it: left for its key to come back
            changes = {"payload": new.body, "error": text(error), "traceback": text(trace)}
            if result is not None:
                changes["result"] = payload(Encoded(ctype, cenc, bytes(result))).body
            rewritten += (
                table.jobs()
                .filter(id=job_id, payload=bytes(body))
                .exclude(state=State.INFLIGHT)
                .update(**changes)
            )
    last = rows[-1][0] if rows else None
    return KeyRotation(seen=len(rows), rewritten=rewritten, last_id=last)
