"""A job's attempt history on a job table (the local backend, the SQS ledger): a row per
attempt kept (``ATTEMPT_HISTORY``), written in the transaction of the ack or the rescue that
ended it, so the history never disagrees with the job."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django_blamequeue.backends.jobtable.rows import to_dt
from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.conf import get_settings
from django_blamequeue.core.attempts import kept, outcome_of
from django_blamequeue.core.records import Ack, AttemptInfo
from django_blamequeue.models import JobAttempt


class Attempts:
    """The ``blamequeue_attempt`` rows of one backend (its database, its alias)."""

    def __init__(self, table: JobTable) -> None:
        self.table = table

    def rows(self) -> Any:
        return JobAttempt.objects.using(self.table.db).filter(backend=self.table.alias)

    def after_acks(self, acks: Sequence[Ack], applied: dict[str, tuple[Any, ...]]) -> None:
        """Rows for the applied acks whose attempt is kept. ``applied``: the ack statement's
        rows by id (``sql.ACK_RETURNING``: state at 1, attempts at 5, started_at at 8,
        updated_at — the ack's time — at 9)."""
        level = get_settings().attempt_history
        if level == "off":
            return
        made = []
        for a in acks:
            row = applied.get(a.job_id)
            if row is None:
                continue
            state, t = row[1], a.transition
            outcome = outcome_of(state, t)
            if not kept(outcome, level):
                continue
            assert outcome is not None
            won = state == "cancelled" and t.state != "cancelled"  # rule: cancel-wins
            made.append(
                JobAttempt(
                    backend=self.table.alias,
                    job_id=a.job_id,
                    attempt=int(row[5]),
                    outcome=outcome,
                    worker=a.worker,
                    started_at=to_dt(row[8]),
                    finished_at=to_dt(row[9]) or self.table.now(),
                    reason="cancelled" if won else (t.reason.value if t.reason else None),
                    error_type=t.error_type,
                    error=t.error,
                    traceback=t.traceback,
                )
            )
        if made:
            JobAttempt.objects.using(self.table.db).bulk_create(made)

    def stalled(self, ids: Iterable[str], t: datetime, message: str) -> None:
        """Rows for expired leases about to be rescued (their worker never acked): read
        before the rescue's UPDATE, in its transaction."""
        if get_settings().attempt_history == "off":
            return
        rows = self.table.jobs().filter(id__in=list(ids))
        found = rows.values_list("id", "attempts", "started_at")
        JobAttempt.objects.using(self.table.db).bulk_create(
            JobAttempt(
                backend=self.table.alias,
                job_id=job_id,
                attempt=attempts,
                outcome="stalled",
                started_at=started,
                finished_at=t,
                reason="stalled",
                error=message,
            )
            for job_id, attempts, started in found
        )

    def of(self, job_id: str) -> list[AttemptInfo]:
        """The job's history, oldest first."""
        return [
            AttemptInfo(
                job_id=r.job_id,
                seq=i,
                attempt=r.attempt,
                outcome=r.outcome,
                started_at=r.started_at,
                finished_at=r.finished_at,
                worker=r.worker,
                reason=r.reason,
                error_type=r.error_type,
                error=r.error,
                traceback=r.traceback,
            )
            for i, r in enumerate(self.rows().filter(job_id=job_id).order_by("id"), start=1)
        ]

    def forget(self, ids: Sequence[str]) -> None:
        """The history of deleted jobs goes with them."""
        if ids:
            self.rows().filter(job_id__in=list(ids)).delete()
