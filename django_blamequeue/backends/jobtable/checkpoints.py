"""Checkpoints in the job table (the local backend and the SQS ledger): one fenced UPDATE per
500 values, answering the jobs whose token was stale.

The claim returns the column with the lease (``sql.CLAIM_COLUMNS``), so the next attempt reads
what the last one stored; nothing else in the lifecycle touches it (a retry, a rescue, a
release and a DLQ retry all keep it).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction

from django_blamequeue import audit
from django_blamequeue.backends.jobtable.table import JobTable

CHUNK = 500


def save_many(vendor: str, n: int, table: str) -> str:
    """Params per row: id, token, checkpoint text. rule: fence (only the holder of the
    lease, while the job is inflight, writes; a stale token matches no row)."""
    if vendor == "postgresql":
        row, alias = "(%s::varchar, %s::varchar, %s::text)", "v(column1, column2, column3)"
    else:
        row, alias = "(%s, %s, %s)", "v"
    values = ", ".join([row] * n)
    return (
        f"UPDATE {table} SET checkpoint = v.column3 FROM (VALUES {values}) AS {alias} "
        f"WHERE {table}.id = v.column1 AND {table}.lease_token = v.column2 "
        f"AND {table}.state = 'inflight' RETURNING {table}.id, {table}.queue, {table}.attempts"
    )


class Checkpoints:
    """The checkpoint column of held leases: written fenced, read back by the next claim."""

    def __init__(self, table: JobTable) -> None:
        self.table = table

    def save(
        self, items: Sequence[tuple[str, str, str]], now: datetime | None = None
    ) -> frozenset[str]:
        # One value per job (the last): an UPDATE … FROM would apply an arbitrary one of two.
        latest = {job_id: (token, text) for job_id, token, text in items}
        if not latest:
            return frozenset()
        table = self.table
        rows = list(latest.items())
        stored: list[tuple[Any, ...]] = []
        with transaction.atomic(using=table.db):
            for start in range(0, len(rows), CHUNK):
                chunk = rows[start : start + CHUNK]
                params: list[Any] = []
                for job_id, (token, text) in chunk:
                    params += [job_id, token, text]
                statement = save_many(table.connection.vendor, len(chunk), table.name)
                with table.connection.cursor() as cur:
                    cur.execute(statement, params)
                    stored += [tuple(r) for r in cur.fetchall()]
            if stored and audit.needed(audit.CHECKPOINT):
                events = [
                    audit.Event(
                        action=audit.CHECKPOINT,
                        job_id=job_id,
                        queue=queue,
                        backend=table.alias,
                        attempt=attempts,
                        data={"bytes": len(latest[job_id][1].encode("utf-8"))},
                    )
                    for job_id, queue, attempts in stored
                ]
                audit.record(events, using=table.db)
        done = {r[0] for r in stored}
        return frozenset(j for j in latest if j not in done)
