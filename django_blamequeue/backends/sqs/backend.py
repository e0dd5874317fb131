"""The sqs backend: SQS carries the messages and times the leases; a ledger of job records in
the Django database (``SqsJob``) answers what SQS cannot, and fences every ack.

Why a ledger, and what each verb does with SQS: docs/backends/sqs.md. The ledger shares its
code with the local backend (``backends/database``: the insert, the fenced acks with DAG
releases and flow reports, leases, listings, flows); what is here is the SQS side of each
verb, always in this order: the ledger commits first, SQS follows. A crash in between leaves
either a message the receive rules settle, or an unsent row the send step sends.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.checks import Warning as CheckWarning
from django.db import transaction
from django.utils import timezone

from django_blamequeue import audit
from django_blamequeue.backends import wakeup
from django_blamequeue.backends.jobtable.acks import Acks
from django_blamequeue.backends.jobtable.checkpoints import Checkpoints
from django_blamequeue.backends.jobtable.control import ControlRows
from django_blamequeue.backends.jobtable.dag import DagRelease
from django_blamequeue.backends.jobtable.effects import InTransaction, answer
from django_blamequeue.backends.jobtable.inserts import Inserts
from django_blamequeue.backends.jobtable.leases import RESCUE_COLUMNS, Leases
from django_blamequeue.backends.jobtable.listing import Listing
from django_blamequeue.backends.jobtable.manifests import Manifests
from django_blamequeue.backends.jobtable.reports import ChildReports
from django_blamequeue.backends.jobtable.rows import to_dt
from django_blamequeue.backends.sqs import messages
from django_blamequeue.backends.sqs.base import UNAVAILABLE, FollowUps
from django_blamequeue.backends.sqs.receive import Receive
from django_blamequeue.backends.sqs.transport import MAX_DELAY, MAX_VISIBILITY, Outgoing
from django_blamequeue.conf import get_settings
from django_blamequeue.core.records import (
    Ack,
    AckResult,
    EffectsFence,
    EnqueuedJob,
    NewJob,
    RescueReport,
)
from django_blamequeue.core.states import TERMINAL, State
from django_blamequeue.models import FlowDependency

if TYPE_CHECKING:
    from django.core.checks import CheckMessage

_TERMINAL = frozenset(TERMINAL)


class SqsBackend(
    Receive,
    Inserts,
    Leases,
    Checkpoints,
    InTransaction,
    Acks,
    Listing,
    Manifests,
    ChildReports,
    DagRelease,
    ControlRows,
):
    """Amazon SQS (or an emulator) through boto3, with a ledger in a Django database."""

    # -- enqueue ---------------------------------------------------------------------------
    def check_jobs(self, jobs: Sequence[NewJob]) -> None:
        """``PAYLOAD_TOO_LARGE`` for a job whose message cannot fit its queue (created on
        demand to read its ``MaximumMessageSize``), before an outbox row is written. While
        SQS cannot be asked, the check waits for the relay's send (the outbox is for that)."""
        try:
            self._check_sizes(jobs)
        except UNAVAILABLE:
            return

    def _check_sizes(self, jobs: Sequence[NewJob]) -> None:
        for job in jobs:
            messages.check_size(job, self.transport.queue(job.queue))

    def enqueue_many(
        self,
        jobs: Sequence[NewJob],
        now: datetime | None = None,
        *,
        events: Sequence[audit.Event] = (),
    ) -> list[EnqueuedJob]:
        """Ledger rows first (an existing id answers without a second row, a held dedupe key
        answers its holder), then ``SendMessageBatch``, then ``sent_at``.

        Inside a transaction on the ledger's database (the outbox relay, a fan-out landing
        its children) the rows join it and are sent once it commits. Outside one, a failed
        send removes the rows again and raises: the enqueue did not happen.
        """
        if not jobs:
            return []
        self._check_sizes(jobs)
        if self.connection.in_atomic_block:
            t = self._now(now)
            answer, inserted = self._insert(jobs, t)
            self._record_enqueue(jobs, answer, events)
            ids = sorted(inserted)
            if ids:
                transaction.on_commit(lambda: self._send_quietly(ids, t), using=self.db)
            return [answer[j.job_id] for j in jobs]
        if self._one_statement(jobs, ()):  # PostgreSQL: the INSERT reads the clock itself
            inserted = self._insert_rows(jobs, now)
            answer = {
                j.job_id: EnqueuedJob(job_id=j.job_id, queue_name=j.queue, backend=self.alias)
                for j in jobs
            }
        else:
            with transaction.atomic(using=self.db):
                answer, inserted = self._insert(jobs, now)
                self._record_enqueue(jobs, answer, (), audited=False)
        new = [j for j in jobs if j.job_id in inserted]
        try:
            sent = self._send_new(new, now)
        except UNAVAILABLE:
            self._unwrite(sorted(inserted))
            raise
        self._mark_sent(sent)
        self._audit_enqueue(new, events)  # only once the enqueue has happened
        wakeup.notify(sorted({j.queue for j in new if j.job_id in sent}))
        return [answer[j.job_id] for j in jobs]

    def _send_new(self, jobs: Sequence[NewJob], now: datetime | None) -> set[str]:
        """Send just-inserted jobs that are due within 15 minutes; blocked and parked ones
        wait (for their release, for the send step). A ``run_at``'s delay is counted from
        this host's clock: SQS delays by AWS's, and the ledger holds the due time anyway."""
        by_queue: dict[str, list[Outgoing]] = {}
        t = now or timezone.now()
        for j in jobs:
            if j.blocked:
                continue
            delay = messages.delay_of(j.run_at, t) if j.run_at else (j.delay or 0.0)
            if delay <= MAX_DELAY:
                out = messages.outgoing(messages.of_job(j), j.job_id, delay)
                by_queue.setdefault(j.queue, []).append(out)
        sent: set[str] = set()
        for queue, batch in by_queue.items():
            sent |= self._send_to(queue, batch)
        return sent

    def _unwrite(self, ids: Sequence[str]) -> None:
        """Undo an enqueue whose send failed: its rows and DAG edges, never a row sent."""
        with transaction.atomic(using=self.db):
            FlowDependency.objects.using(self.db).filter(job_id__in=list(ids)).delete()
            self.jobs().filter(id__in=list(ids), sent_at=None).delete()

    # -- acks ------------------------------------------------------------------------------
    def apply_many(self, acks: Sequence[Ack], now: datetime | None = None) -> list[AckResult]:
        """The fenced ledger update (exactly the local semantics), then SQS: a terminal or
        parked job's message is deleted (a failed job's copied to the DLQ queue), a retry's
        hidden for its backoff, a released one's made visible now."""
        if not acks:
            return []
        owed = FollowUps()
        with transaction.atomic(using=self.db):
            results = self._apply_owing(acks, now, owed)
        self._follow_up(owed)
        return results

    def fence_effects(self, ack: Ack, *, attempt: int, now: datetime | None = None) -> EffectsFence:
        """The ledger's fenced ack inside the atomic run's transaction; SQS follows its
        commit (a crash in between leaves a message the receive rules delete)."""
        if not self.connection.in_atomic_block:
            raise RuntimeError("fence_effects runs inside the atomic run's transaction")
        owed = FollowUps()
        [result] = self._apply_owing([ack], now, owed)
        if result.ok:
            transaction.on_commit(lambda: self._follow_up(owed), using=self.db)
        return answer(result)

    def _apply_owing(
        self, acks: Sequence[Ack], now: datetime | None, owed: FollowUps
    ) -> list[AckResult]:
        """The fenced ledger update in the caller's transaction; what SQS owes goes to
        ``owed``, to be paid once it commits."""
        held = {
            r[0]: r[1:]
            for r in self.jobs()
            .filter(id__in=[a.job_id for a in acks])
            .values_list("id", "lease_token", "receipt_handle", "queue", "receive_count")
        }
        results = self._apply(acks, now)
        unsent = self._owed_by_acks(acks, results, held, owed)
        self._mark_unsent(unsent)
        return results

    def _owed_by_acks(
        self,
        acks: Sequence[Ack],
        results: Sequence[AckResult],
        held: dict[str, tuple[Any, ...]],
        owed: FollowUps,
    ) -> list[str]:
        """What SQS owes for each applied ack; answers the jobs left without a message."""
        unsent: list[str] = []
        max_receives = self.transport.max_receive_count
        for a, r in zip(acks, results, strict=True):
            token, receipt, queue, receives = held.get(a.job_id, (None, None, "", 0))
            if not r.ok or token != a.token:
                continue
            if r.state in _TERMINAL or r.state == State.WAITING_CHILDREN:
                owed.remove(queue, receipt)  # a release / settle / DLQ retry sends anew
                if r.state == State.FAILED:
                    owed.to_dlq.append(a.job_id)
            elif r.state == State.PENDING:
                delay = a.transition.delay
                # A fresh message past 15 minutes, or before SQS's receive count would move
                # this one to the DLQ queue (maxReceiveCount) while the job still has attempts.
                if delay > MAX_DELAY or receives + 1 >= max_receives:
                    owed.remove(queue, receipt)
                    unsent.append(a.job_id)
                    owed.send.append(a.job_id)
                else:
                    owed.hold(queue, receipt, math.ceil(delay))
        return unsent

    # -- leases ----------------------------------------------------------------------------
    def renew_leases(
        self, leases: Sequence[tuple[str, str]], seconds: float, now: datetime | None = None
    ) -> frozenset[str]:
        """The ledger's leases, then each message hidden as long (the ledger is the lease;
        SQS's visibility only keeps other workers from receiving it meanwhile)."""
        if not leases:
            return frozenset()
        rows = self._renew(leases, seconds, now, "id, receipt_handle, queue, lease_expires_at")
        self._hide(rows, now, wait=False)
        renewed = {r[0] for r in rows}
        return frozenset(j for j, _ in leases if j not in renewed)

    def extend_lease(
        self, job_id: str, token: str, seconds: float, now: datetime | None = None
    ) -> bool:
        if not super().extend_lease(job_id, token, seconds, now):
            return False
        rows = self.jobs().filter(id=job_id, lease_token=token, state=State.INFLIGHT)
        self._hide(rows.values_list("id", "receipt_handle", "queue", "lease_expires_at"), now)
        return True

    def _hide(
        self, rows: Iterable[tuple[Any, ...]], now: datetime | None, *, wait: bool = True
    ) -> None:
        """Hide held messages until their lease's end (+1 s); ``wait`` False: in the
        background (``_hide_soon``). Past SQS's 12-hour cap the change is refused and the
        message resurfaces: the receive rules hide it again, with a fresh 12 hours, and hand
        the holder the new receipt handle."""

        t = self._now(now)
        owed = FollowUps()
        for _, receipt, queue, expires in rows:
            until = to_dt(expires) or t
            owed.hold(
                queue, receipt, min(math.ceil((until - t).total_seconds()) + 1, MAX_VISIBILITY)
            )
        if wait:
            self._follow_up(owed)
        elif owed.visibility:
            self._hide_soon(owed)

    def rescue_expired(
        self, now: datetime | None = None, limit: int = 1000, *, max_stalled: int = 1
    ) -> RescueReport:
        """Expired leases back to pending (stall + 1) or failed as stalled, in the ledger;
        then their messages: visible now, or deleted (a new one sent if it is gone)."""
        owed = FollowUps()
        with transaction.atomic(using=self.db):
            t = self._now(now)
            qs = self.jobs().filter(state=State.INFLIGHT, lease_expires_at__lt=t)
            qs = qs.order_by("lease_expires_at")
            if self.is_postgres:
                qs = qs.select_for_update(skip_locked=True)
            rows = list(qs.values_list(*RESCUE_COLUMNS, "receipt_handle")[:limit])
            groups = self._rescue_rows([r[:-1] for r in rows], t, max_stalled)
            receipts = {r[0]: r[-1] for r in rows}
            for s in (State.FAILED, State.CANCELLED):
                for r in groups[s]:
                    owed.remove(r[5], receipts[r[0]])
            owed.to_dlq += [r[0] for r in groups[State.FAILED]]
        self._follow_up(owed)
        self._show([(r[0], r[5], receipts[r[0]]) for r in groups[State.PENDING]])
        return RescueReport(
            repended=len(groups[State.PENDING]),
            failed=len(groups[State.FAILED]),
            cancelled=len(groups[State.CANCELLED]),
        )

    def _show(self, rows: Sequence[tuple[str, str, str | None]]) -> None:
        """Make re-pended jobs' messages visible now; a message that is gone (its receipt
        refused) is replaced by a new one."""
        by_queue: dict[str, list[tuple[str, str | None]]] = {}
        for job_id, queue, receipt in rows:
            by_queue.setdefault(queue, []).append((job_id, receipt))
        lost: list[str] = [j for j, _, r in rows if not r]
        for queue, items in by_queue.items():
            changes = [(r, 0) for _, r in items if r]
            refused = self._quietly(
                queue,
                "visibility",
                lambda q=queue, c=changes: self.transport.change_visibility(q, c),
            )
            lost += [j for j, r in items if r and (refused is None or r in refused)]
        if lost:
            with transaction.atomic(using=self.db):
                self._mark_unsent(lost)
            self._send_quietly(lost)

    # -- deployment ------------------------------------------------------------------------
    def check(self, queues: Sequence[str] = ()) -> Iterable[CheckMessage]:
        """W003: ``MAX_PAYLOAD_BYTES`` above an existing queue's ``MaximumMessageSize`` (the
        queues of ``QUEUES``, else those of the registered jobs)."""
        cap = get_settings().max_payload_bytes
        names = self.config.queues or list(queues)
        found = []
        for name in names:
            info = self.transport.existing(name)
            if info is not None and cap > info.max_message_size:
                found.append(
                    CheckWarning(
                        f"backend {self.alias!r}: MAX_PAYLOAD_BYTES is {cap}, above the "
                        f"MaximumMessageSize of SQS queue {info.name!r} "
                        f"({info.max_message_size}); larger payloads fail with "
                        "PAYLOAD_TOO_LARGE",
                        hint="Lower MAX_PAYLOAD_BYTES, or raise the queue's MaximumMessageSize "
                        "(up to 1048576) with SetQueueAttributes.",
                        id="blamequeue.W003",
                    )
                )
        return found


__all__ = ["SqsBackend"]
