"""The sqs backend: SQS carries the messages and times the leases; a ledger of job records in
the Django database (``SqsJob``) answers what SQS cannot, and fences every ack.

Why a ledger, and what each verb does with SQS: docs/backends/sqs.md. The ledger is a job
table like the local backend's, and this backend holds the same parts of ``backends/jobtable``
over it (the insert, the fenced acks with DAG releases and flow reports, leases, listings,
flows); what is here is the SQS side of each verb, always in this order: the ledger commits
first, SQS follows (``Sender``). A crash in between leaves either a message the receive rules
settle (``Receiver``), or an unsent row the send step sends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.exceptions import HTTPClientError
from django.core.checks import Warning as CheckWarning
from django.db import InterfaceError, OperationalError, transaction

from django_blamequeue import audit
from django_blamequeue.backends import wakeup
from django_blamequeue.backends.jobtable import effects, rotation
from django_blamequeue.backends.jobtable.engine import JobTableBackend
from django_blamequeue.backends.jobtable.leases import RESCUE_COLUMNS
from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.backends.jobtable.uniques import conflict_events
from django_blamequeue.backends.sqs import messages
from django_blamequeue.backends.sqs.receive import Receiver
from django_blamequeue.backends.sqs.sender import FollowUps, Sender
from django_blamequeue.backends.sqs.transport import SqsUnavailable, Transport
from django_blamequeue.conf import BackendConfig, get_settings
from django_blamequeue.core.limits import QueueLimits
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import (
    Ack,
    AckResult,
    Claimed,
    EffectsFence,
    EnqueuedJob,
    KeyRotation,
    NewJob,
    RescueReport,
)
from django_blamequeue.core.states import TERMINAL, State
from django_blamequeue.models import FlowDependency, SqsJob

if TYPE_CHECKING:
    from django.core.checks import CheckMessage

#: Errors that mean SQS (or the ledger's database) cannot be reached.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    OperationalError,
    InterfaceError,
    BotoConnectionError,
    HTTPClientError,
    SqsUnavailable,
)


class SqsBackend(JobTableBackend):
    """Amazon SQS (or an emulator) through boto3, with a ledger in a Django database."""

    protocol = "sqs"
    supports_flows = True
    supports_priority = False  # SQS delivers in its own order; priority is stored and shown
    supports_time_travel = False  # visibility and delays run on AWS's clock
    supports_key_order = False  # limits lease among the messages SQS delivers, in its order
    sends_later = True  # the ledger's unsent rows: ``send_unsent`` sends them
    effects_with_ack = True
    supports_key_rotation = True  # the ledger; a sent message keeps its body (left_old)
    unavailable_errors = UNAVAILABLE

    def __init__(self, config: BackendConfig) -> None:
        # SQS has no push: wake-ups reach this process's consumers only; others poll.
        table = JobTable(SqsJob, config, notifies=False)
        self.transport = Transport(config.options)
        self.sender = Sender(table, self.transport, float(config.options.get("SEND_GRACE") or 30.0))
        super().__init__(config, table, self.sender.released, listen=False)
        self.receiver = Receiver(
            table, self.transport, self.sender, self.leases, self.limited, self.expiry
        )

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
        if self.jobtable.connection.in_atomic_block:
            t = self.jobtable.clock(now)
            answer, inserted = self.inserts.insert(jobs, t)
            self.inserts.record_enqueue(jobs, answer, events)
            ids = sorted(inserted)
            if ids:
                transaction.on_commit(lambda: self.sender.send_quietly(ids, t), using=self.db)
            return [answer[j.job_id] for j in jobs]
        if self.inserts.one_statement(jobs, ()):  # PostgreSQL: the INSERT reads the clock
            inserted = self.inserts.insert_rows(jobs, now)
            answer = {
                j.job_id: EnqueuedJob(job_id=j.job_id, queue_name=j.queue, backend=self.alias)
                for j in jobs
            }
        else:
            with transaction.atomic(using=self.db):
                answer, inserted = self.inserts.insert(jobs, now)
                self.inserts.record_enqueue(jobs, answer, (), audited=False)
        new = [j for j in jobs if j.job_id in inserted]
        try:
            sent = self.sender.send_new(new, now)
        except UNAVAILABLE:
            self._unwrite(sorted(inserted))
            raise
        self.sender.mark_sent(sent)
        conflicts = conflict_events([answer[j.job_id] for j in jobs], jobs, self.alias)
        self.inserts.audit_enqueue(new, [*events, *conflicts])  # once the enqueue happened
        wakeup.notify(sorted({j.queue for j in new if j.job_id in sent}))
        return [answer[j.job_id] for j in jobs]

    def _unwrite(self, ids: Sequence[str]) -> None:
        """Undo an enqueue whose send failed: its rows and DAG edges, never a row sent."""
        with transaction.atomic(using=self.db):
            FlowDependency.objects.using(self.db).filter(job_id__in=list(ids)).delete()
            self.jobtable.jobs().filter(id__in=list(ids), sent_at=None).delete()

    # -- leasing ---------------------------------------------------------------------------
    def claim(
        self,
        queues: Sequence[str],
        limit: int,
        lease_s: float,
        now: datetime | None = None,
        *,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> list[Claimed]:
        """Receive messages, then lease their jobs in the ledger (``receive.py``)."""
        return self.receiver.claim(queues, limit, lease_s, now, limits=limits)

    def apply_many(self, acks: Sequence[Ack], now: datetime | None = None) -> list[AckResult]:
        """The fenced ledger update (exactly the local semantics), then SQS: a terminal or
        parked job's message is deleted (a failed job's copied to the DLQ queue), a retry's
        hidden for its backoff, a released one's made visible now."""
        if not acks:
            return []
        owed = FollowUps()
        with transaction.atomic(using=self.db):
            results = self._apply_owing(acks, now, owed)
        self.sender.follow_up(owed)
        return results

    def fence_effects(self, ack: Ack, *, attempt: int, now: datetime | None = None) -> EffectsFence:
        """The ledger's fenced ack inside the atomic run's transaction; SQS follows its
        commit (a crash in between leaves a message the receive rules delete)."""
        effects.require_transaction(self.jobtable)
        owed = FollowUps()
        [result] = self._apply_owing([ack], now, owed)
        if result.ok:
            transaction.on_commit(lambda: self.sender.follow_up(owed), using=self.db)
        return effects.answer(result)

    def _apply_owing(
        self, acks: Sequence[Ack], now: datetime | None, owed: FollowUps
    ) -> list[AckResult]:
        """The fenced ledger update in the caller's transaction; what SQS owes goes to
        ``owed``, to be paid once it commits."""
        held = {
            r[0]: r[1:]
            for r in self.jobtable.jobs()
            .filter(id__in=[a.job_id for a in acks])
            .values_list("id", "lease_token", "receipt_handle", "queue", "receive_count")
        }
        results = self.acks.apply(acks, now)
        unsent = self.sender.owed_by_acks(acks, results, held, owed)
        self.sender.mark_unsent(unsent)
        return results

    def extend_lease(
        self, job_id: str, token: str, seconds: float, now: datetime | None = None
    ) -> bool:
        if not self.leases.extend(job_id, token, seconds, now):
            return False
        rows = self.jobtable.jobs().filter(id=job_id, lease_token=token, state=State.INFLIGHT)
        self.sender.hide(rows.values_list("id", "receipt_handle", "queue", "lease_expires_at"), now)
        return True

    def renew_leases(
        self, leases: Sequence[tuple[str, str]], seconds: float, now: datetime | None = None
    ) -> frozenset[str]:
        """The ledger's leases, then each message hidden as long (the ledger is the lease;
        SQS's visibility only keeps other workers from receiving it meanwhile)."""
        if not leases:
            return frozenset()
        returning = "id, receipt_handle, queue, lease_expires_at"
        rows = self.leases.renew_rows(leases, seconds, now, returning)
        self.sender.hide(rows, now, wait=False)
        renewed = {r[0] for r in rows}
        return frozenset(j for j, _ in leases if j not in renewed)

    def expire(self, now: datetime | None = None, limit: int = 500) -> list[str]:
        """In the ledger; an expired job's message is deleted when it is next received (its
        row is terminal)."""
        return self.expiry.expire(now, limit)

    def rescue_expired(
        self, now: datetime | None = None, limit: int = 1000, *, max_stalled: int = 1
    ) -> RescueReport:
        """Expired leases back to pending (stall + 1) or failed as stalled, in the ledger;
        then their messages: visible now, or deleted (a new one sent if it is gone)."""
        owed = FollowUps()
        with transaction.atomic(using=self.db):
            t = self.jobtable.clock(now)
            qs = self.jobtable.jobs().filter(state=State.INFLIGHT, lease_expires_at__lt=t)
            qs = qs.order_by("lease_expires_at")
            if self.jobtable.is_postgres:
                qs = qs.select_for_update(skip_locked=True)
            rows = list(qs.values_list(*RESCUE_COLUMNS, "receipt_handle")[:limit])
            groups = self.leases.rescue_rows([r[:-1] for r in rows], t, max_stalled)
            receipts = {r[0]: r[-1] for r in rows}
            for s in (State.FAILED, State.CANCELLED):
                for r in groups[s]:
                    owed.remove(r[5], receipts[r[0]])
            owed.to_dlq += [r[0] for r in groups[State.FAILED]]
        self.sender.follow_up(owed)
        self.sender.show([(r[0], r[5], receipts[r[0]]) for r in groups[State.PENDING]])
        return RescueReport(
            repended=len(groups[State.PENDING]),
            failed=len(groups[State.FAILED]),
            cancelled=len(groups[State.CANCELLED]),
        )

    # -- the send step ---------------------------------------------------------------------
    def send_due(self, now: datetime | None = None, limit: int = 500) -> int:
        """Send pending jobs that have no live message (``Sender.send_due``)."""
        return self.sender.send_due(now, limit)

    def send_unsent(self, limit: int = 500) -> int:
        return self.send_due(limit=limit)

    # -- key rotation, deployment, connections ---------------------------------------------
    def rotate_keys(
        self,
        payload: Callable[[Encoded], Encoded],
        text: Callable[[str | None], str | None],
        *,
        after: str = "",
        limit: int = 500,
    ) -> KeyRotation:
        """The ledger re-sealed (the claim reads the payload from it, never from the message
        body); a job whose message was sent and is not finished keeps the old token in that
        message until the job finishes and it is deleted (``left_old``)."""
        return rotation.rotate(
            self.jobtable, payload, text, after=after, limit=limit, left_old=self._sent_unfinished
        )

    def _sent_unfinished(self, job_ids: Sequence[str]) -> int:
        rows = self.jobtable.jobs().filter(id__in=list(job_ids), sent_at__isnull=False)
        return int(rows.exclude(state__in=list(TERMINAL)).count())

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

    def close(self) -> None:
        self.sender.close()
        self.transport.close()


__all__ = ["SqsBackend"]
