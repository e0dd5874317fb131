"""A warning when a long transaction pins PostgreSQL's xmin horizon.

While any session of the job tables' database holds a snapshot or an xid, vacuum may not
remove the dead index entries every claim and ack leave, and each claim walks more of them:
throughput falls for as long as the transaction lives
(docs/operations.md#postgresql-under-pressure). The queue cannot end someone else's
transaction, but it can name it: once a minute the sweeper looks for the oldest one in the
database and logs it past ``threshold`` seconds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import connections

logger = logging.getLogger("django_blamequeue.sweeper")

#: The session whose snapshot or xid is the oldest in this database, other than this one.
OLDEST = """
SELECT pid, application_name, state, extract(epoch FROM now() - xact_start)
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL) AND xact_start IS NOT NULL
ORDER BY xact_start
LIMIT 1
"""


@dataclass(frozen=True, slots=True)
class Holder:
    """The oldest transaction of the database: who, in what state, for how long."""

    pid: int
    application: str
    state: str
    seconds: float


class HorizonWatch:
    def __init__(self, database: str, *, threshold: float = 60.0, period: float = 60.0) -> None:
        self.database = database
        self.threshold = threshold
        self.period = period
        self.name = f"horizon[{database}]"

    def run_once(self) -> Holder | None:
        """The holder past ``threshold`` (logged as a warning), else None; None off PostgreSQL."""
        conn = connections[self.database]
        if conn.vendor != "postgresql":
            return None
        with conn.cursor() as cur:
            cur.execute(OLDEST)
            row = cur.fetchone()
        if row is None or row[3] is None or float(row[3]) < self.threshold:
            return None
        holder = Holder(
            pid=int(row[0]), application=row[1] or "", state=row[2] or "", seconds=float(row[3])
        )
        logger.warning(
            "a transaction open for %.0f s holds back vacuum of the job tables (pid %d, "
            "application %r, %s): claims slow down until it ends",
            holder.seconds,
            holder.pid,
            holder.application,
            holder.state,
        )
        return holder
