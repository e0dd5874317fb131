"""The waker: wakes parked workflows whose event was sent or whose child ended.

``queue.send_event`` wakes its waiters once its transaction commits; this pass is what makes
that safe: an event whose wake-up was lost (a crash after the commit, a waiter that parked
just after the event came), or a child that ended, wakes its workflow within one period.
A child's end has no push of its own: the waker is how its parent learns of it.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from django_blamequeue.jobs import workflow_ops
from django_blamequeue.jobs.workflow_ops import WakeReport


class Waker:
    def __init__(self, database: str, *, period: float = 1.0) -> None:
        self.database = database
        self.period = period
        self.name = f"waker[{database}]"

    def run_once(self, now: datetime | None = None) -> WakeReport:
        return workflow_ops.wake_due(self.database, now or timezone.now())
