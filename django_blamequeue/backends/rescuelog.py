"""The log lines of a rescue, the same on every backend: a WARNING per job whose expired
lease sent it back to pending, an ERROR per job it moved to the DLQ (a failing job
shows in the worker's log, not only in the audit trail)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django_blamequeue.core.rules import STALLED_MESSAGE

logger = logging.getLogger("django_blamequeue.rescue")

#: One rescued job: (job id, name, queue, to — "pending", "failed" or "cancelled",
#: attempts, max_attempts, stalls including this one).
Rescued = tuple[str, Any, Any, str, Any, Any, Any]


def log_rescued(alias: str, rescued: Iterable[Rescued]) -> None:
    for job_id, name, queue, to, attempts, max_attempts, stalls in rescued:
        if to not in ("pending", "failed"):
            continue
        logger.log(
            logging.ERROR if to == "failed" else logging.WARNING,
            "job %s (%s) on %s %s: stalled, attempt %s/%s, stall %s (%s; backend %r)",
            *(job_id, name, queue, "moved to the DLQ" if to == "failed" else "back to pending"),
            *(attempts, max_attempts, stalls, STALLED_MESSAGE, alias),
            extra={"job_id": job_id, "queue": queue, "attempt": attempts},
        )
