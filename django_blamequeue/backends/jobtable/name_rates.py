"""Job names' rate windows (``@job(rate_limit="10/m")``) in the job table's database.

A name's window is shared by every queue of the backend, so it is rows of
``blamequeue_rate_start`` with the queue left blank (no queue is named "") and the job name
as the key, counted and written by the limited claim (``limited.py``, ``sqs/receive.py``)
under a lock per name: on PostgreSQL a transaction-scoped advisory lock, taken in name order
before any queue's control row, so two claims never wait on each other in a circle; on SQLite
the write transaction serialises every claim anyway. Rows older than the window are deleted
by the next count.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.core.controls import QueueLimits
from django_blamequeue.core.records import Claimed

RATE = "blamequeue_rate_start"
#: The queue of a name's window rows: none is named "" (queue names are non-empty).
NAME_WINDOW = ""


class NameRates:
    def __init__(self, table: JobTable) -> None:
        self.table = table

    def lock(self, names: Iterable[str]) -> None:
        """Take each name's lock for this transaction, in name order (PostgreSQL)."""
        wanted = sorted(set(names))
        if not wanted or not self.table.is_postgres:
            return
        with self.table.connection.cursor() as cur:
            for name in wanted:  # one at a time: the order is the lock order
                cur.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    [f"blamequeue:rate:{self.table.alias}:{name}"],
                )

    def count(self, limits: QueueLimits, t: datetime) -> dict[str, int]:
        """Starts in each limited name's window at ``t`` (after the name's lock)."""
        rates = limits.name_rate_limits
        if not rates:
            return {}
        a = self.table.adapt
        old = " OR ".join(["(key = %s AND started_at <= %s)"] * len(rates))
        params: list[object] = [self.table.alias, NAME_WINDOW]
        for name, _, per in rates:
            params += [name, a(t - timedelta(seconds=per))]
        names = [name for name, _, _ in rates]
        with self.table.connection.cursor() as cur:
            cur.execute(f"DELETE FROM {RATE} WHERE backend = %s AND queue = %s AND ({old})", params)
            cur.execute(
                f"SELECT key, count(*) FROM {RATE} WHERE backend = %s AND queue = %s "
                f"AND key IN ({', '.join(['%s'] * len(names))}) GROUP BY key",
                [self.table.alias, NAME_WINDOW, *names],
            )
            return {key: n for key, n in cur.fetchall()}

    def record(self, limits: QueueLimits, claimed: Sequence[Claimed], t: datetime) -> None:
        """The starts of the claimed jobs whose name is limited, in their names' windows."""
        limited = {name for name, _, _ in limits.name_rate_limits}
        stamp = self.table.adapt(t)
        rows: list[object] = []
        for c in claimed:
            if c.name in limited:
                rows += [self.table.alias, NAME_WINDOW, c.name, stamp]
        if rows:
            values = ", ".join(["(%s, %s, %s, %s)"] * (len(rows) // 4))
            with self.table.connection.cursor() as cur:
                cur.execute(
                    f"INSERT INTO {RATE} (backend, queue, key, started_at) VALUES {values}", rows
                )
