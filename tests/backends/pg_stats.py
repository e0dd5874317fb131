"""What a PostgreSQL statement read, from the server's per-transaction statistics."""

from __future__ import annotations

from django.db import connections


def index_entries_read(db: str, index: str) -> int:
    """Entries ``index`` handed out to scans so far in the current transaction (entries of
    dead rows included: what a statement pays for before it finds a live row)."""
    with connections[db].cursor() as cur:
        cur.execute("SELECT pg_stat_get_xact_tuples_returned(%s::regclass)", [index])
        row = cur.fetchone()
        return int(row[0]) if row else 0
