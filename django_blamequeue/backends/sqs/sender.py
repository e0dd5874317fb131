"""What SQS is owed once the ledger commits: messages sent for jobs left pending without one,
deleted for jobs that ended, hidden for leases and retries, shown for rescued jobs.

The rule every verb keeps: a ``pending`` ledger row needs a live message, and ``sent_at``
says whether one was sent. A transaction that leaves a job pending without a message sets
``sent_at`` NULL in that same transaction and sends after its commit; the send is marked
only once SQS has accepted it. A crash between the two leaves ``sent_at`` NULL, so the send
step (``send_due``, run by the relay and the sweeper) sends it again once ``SEND_GRACE`` has
passed. Sending twice is harmless: the receive rules hold or delete a second message.
"""

from __future__ import annotations

import logging
import math
import queue as queue_module
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone

from django_blamequeue.backends import wakeup
from django_blamequeue.backends.jobtable.rows import to_dt
from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.backends.sqs import messages
from django_blamequeue.backends.sqs.messages import SEND_COLUMNS
from django_blamequeue.backends.sqs.transport import (
    MAX_DELAY,
    MAX_VISIBILITY,
    Outgoing,
    QueueGone,
    Transport,
)
from django_blamequeue.core.records import Ack, AckResult, NewJob
from django_blamequeue.core.states import TERMINAL, State

logger = logging.getLogger("django_blamequeue.sqs")
CHUNK = 500
REFRESH_EVERY = 300.0  # seconds between two looks for messages near their retention
MARK_EVERY = 100  # messages sent between two records of what was sent
_TERMINAL = frozenset(TERMINAL)


@dataclass
class FollowUps:
    """SQS calls owed after a ledger commit, grouped by queue."""

    delete: dict[str, list[str]] = field(default_factory=dict)  # queue → receipts
    visibility: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    to_dlq: list[str] = field(default_factory=list)  # job ids whose copy goes to the DLQ
    send: list[str] = field(default_factory=list)  # job ids made pending without a message

    def remove(self, queue: str, receipt: str | None) -> None:
        if receipt:
            self.delete.setdefault(queue, []).append(receipt)

    def hold(self, queue: str, receipt: str | None, seconds: int) -> None:
        if receipt:
            self.visibility.setdefault(queue, []).append((receipt, seconds))


class Sender:
    """The SQS side of the ledger: sends, and the calls that follow a ledger commit."""

    def __init__(self, table: JobTable, transport: Transport, send_grace: float) -> None:
        self.table = table
        self.transport = transport
        self.send_grace = send_grace
        self._next_refresh = 0.0
        self._hiding: queue_module.Queue[FollowUps | None] = queue_module.Queue(maxsize=1000)
        self._hider: threading.Thread | None = None

    def close(self) -> None:
        if self._hider is not None:
            self._hiding.put(None)

    def released(self, rows: Sequence[tuple[str, str]], now: datetime) -> None:
        """Jobs made pending from a state without a message (a DAG release, a settled flow
        parent, a DLQ retry): unsent in this transaction, sent once it commits."""
        ids = [job_id for job_id, _ in rows]
        if not ids:
            return
        self.mark_unsent(ids)
        transaction.on_commit(lambda: self.send_quietly(ids, now), using=self.table.db)

    # -- the ledger's send bookkeeping -------------------------------------------------------
    def send_new(self, jobs: Sequence[NewJob], now: datetime | None) -> set[str]:
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
            sent |= self.send_to(queue, batch)
        return sent

    def mark_unsent(self, ids: Sequence[str]) -> None:
        for start in range(0, len(ids), CHUNK):
            chunk = list(ids[start : start + CHUNK])
            self.table.jobs().filter(id__in=chunk).exclude(sent_at=None).update(sent_at=None)

    def mark_sent(self, ids: Iterable[str], read_at: datetime | None = None) -> None:
        """Record the sends (one autocommit UPDATE per 500), unless the row changed since it
        was read: its state may no longer be the one the message was sent for (a claim, a
        retry that deleted this very message). Unchanged means ``updated_at`` not after
        ``read_at``, or with no ``read_at`` (a row just inserted) still its ``created_at``."""
        ids = list(ids)
        if not ids:
            return
        unchanged = Q(updated_at=F("created_at")) if read_at is None else Q(updated_at__lte=read_at)
        marks = [
            self.table.jobs().filter(unchanged, id__in=ids[start : start + CHUNK], sent_at=None)
            for start in range(0, len(ids), CHUNK)
        ]
        if not self.table.is_postgres or self.table.connection.in_atomic_block:
            for qs in marks:
                qs.update(sent_at=Now())
            return
        with transaction.atomic(using=self.table.db):
            # A mark lost in a crash costs one duplicate message, never a job: it need not
            # wait for the WAL flush (which was half of an enqueue's time on PostgreSQL).
            with self.table.connection.cursor() as cur:
                cur.execute("SET LOCAL synchronous_commit TO OFF")
            for qs in marks:
                qs.update(sent_at=Now())

    def send_quietly(self, ids: Sequence[str], now: datetime | None = None) -> None:
        """After a commit: send, or leave it to the send step (``sent_at`` stays NULL)."""
        try:
            self._send_ids(ids, now)
        except Exception as exc:
            logger.warning("SQS send of %d job(s) deferred to the send step: %s", len(ids), exc)

    def _send_ids(self, ids: Sequence[str], now: datetime | None = None) -> int:
        """Send the messages of these jobs if they are still pending and unsent."""
        t = self.table.clock(now)
        sent = 0
        for start in range(0, len(ids), CHUNK):
            rows = list(
                self.table.jobs()
                .filter(id__in=list(ids[start : start + CHUNK]), state=State.PENDING, sent_at=None)
                .values_list(*SEND_COLUMNS)
            )
            sent += self._send_rows(rows, t)
        return sent

    def _send_rows(self, rows: Sequence[tuple[Any, ...]], t: datetime) -> int:
        """Send rows read as ``SEND_COLUMNS`` at ``t``: those due within SQS's 15-minute
        delay now (``DelaySeconds`` = what remains), the rest stay parked. Sends are
        recorded every ``MARK_EVERY`` messages, so a long pass leaves little unrecorded."""
        by_queue: dict[str, list[Outgoing]] = {}
        for row in rows:
            remaining = messages.delay_of(to_dt(row[8]) or t, t)
            if remaining <= MAX_DELAY:
                text = messages.of_row(row)
                by_queue.setdefault(row[1], []).append(messages.outgoing(text, row[0], remaining))
        sent = 0
        for queue, batch in by_queue.items():
            for start in range(0, len(batch), MARK_EVERY):
                ids = self.send_to(queue, batch[start : start + MARK_EVERY])
                self.mark_sent(ids, t)
                sent += len(ids)
            wakeup.notify([queue])
        return sent

    def send_to(self, queue: str, batch: Sequence[Outgoing]) -> set[str]:
        try:
            return self.transport.send(queue, batch)
        except QueueGone:
            self.queue_gone(queue)
            return self.transport.send(queue, batch)

    def queue_gone(self, queue: str) -> None:
        """The queue was deleted or the emulator restarted, taking every message with it:
        recreate it and mark its pending jobs unsent. The send step sends them again on its
        next pass (in the sweeper's thread: never a worker's loop, which holds leases)."""
        logger.warning("SQS queue for %r is gone; recreating it and re-sending its jobs", queue)
        self.transport.queue(queue)
        self.table.jobs().filter(queue=queue, state=State.PENDING).exclude(sent_at=None).update(
            sent_at=None
        )

    def send_due(self, now: datetime | None = None, limit: int = 500) -> int:
        """The send step: pending jobs with no live message, due within 15 minutes, that no
        sender has touched for ``SEND_GRACE`` (so it never races the enqueue about to send
        them, nor another pass of itself). Answers how many were sent."""
        t = self.table.clock(now)
        if now is not None or time.monotonic() >= self._next_refresh:
            self._next_refresh = time.monotonic() + REFRESH_EVERY
            self._refresh_old_sends(t)
        rows = self._take(t, t - timedelta(seconds=self.send_grace), limit)
        return self._send_rows(rows, t) if rows else 0

    def _refresh_old_sends(self, t: datetime) -> int:
        """Pending jobs whose message was sent three quarters of the queues' retention
        period ago (SQS deletes a message unreceived for that long): unsent, so this pass
        sends them again. A message still there becomes a duplicate, held or deleted by the
        receive rules."""
        old = t - timedelta(seconds=0.75 * self.transport.shortest_retention())
        n: int = self.table.jobs().filter(state=State.PENDING, sent_at__lt=old).update(sent_at=None)
        if n:
            logger.warning("re-sending %d SQS job(s) whose message may have expired", n)
        return n

    def _take(
        self, t: datetime, untouched_since: datetime, limit: int, queue: str | None = None
    ) -> list[tuple[Any, ...]]:
        """Rows this sender will send: unsent, due within 15 minutes, unchanged since
        ``untouched_since``. Taking them sets ``updated_at`` to ``t`` in the same statement,
        so concurrent senders skip them (for ``SEND_GRACE``: a sender that dies before
        sending leaves them to the next pass). Answers them as ``SEND_COLUMNS``.
        """
        qs = self.table.jobs().filter(
            state=State.PENDING,
            sent_at=None,
            available_at__lte=t + timedelta(seconds=MAX_DELAY),
            updated_at__lte=untouched_since,
        )
        if queue is not None:
            qs = qs.filter(queue=queue)
        ids = list(qs.order_by("available_at").values_list("id", flat=True)[:limit])
        if not ids:
            return []
        a, table = self.table.adapt, self.table.name
        statement = (
            f"UPDATE {table} SET updated_at = %s WHERE id IN ({', '.join(['%s'] * len(ids))}) "
            "AND state = 'pending' AND sent_at IS NULL AND updated_at <= %s "
            f"RETURNING {', '.join(SEND_COLUMNS)}"
        )
        with self.table.connection.cursor() as cur:
            cur.execute(statement, [a(t), *ids, a(untouched_since)])
            return [tuple(r) for r in cur.fetchall()]

    # -- after a ledger commit ---------------------------------------------------------------
    def follow_up(self, owed: FollowUps) -> None:
        """The SQS calls a committed ledger change owes. A failure is logged, not raised:
        it is a crash at this point, which the receive rules and the send step mend (a
        message not deleted reappears and is deleted then; one not hidden is held then)."""
        for queue, receipts in owed.delete.items():
            self.quietly(queue, "delete", lambda q=queue, r=receipts: self.transport.delete(q, r))
        for queue, changes in owed.visibility.items():
            refused = self.quietly(
                queue,
                "visibility",
                lambda q=queue, c=changes: self.transport.change_visibility(q, c),
            )
            if refused:
                logger.info("SQS refused %d visibility change(s) on %r", len(refused), queue)
        if owed.to_dlq:
            self._copy_to_dlq(owed.to_dlq)
        if owed.send:
            self.send_quietly(owed.send)

    def owed_by_acks(
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

    def hide(
        self, rows: Iterable[tuple[Any, ...]], now: datetime | None, *, wait: bool = True
    ) -> None:
        """Hide held messages until their lease's end (+1 s); ``wait`` False: in the
        background (``hide_soon``). Past SQS's 12-hour cap the change is refused and the
        message resurfaces: the receive rules hide it again, with a fresh 12 hours, and hand
        the holder the new receipt handle."""
        t = self.table.clock(now)
        owed = FollowUps()
        for _, receipt, queue, expires in rows:
            until = to_dt(expires) or t
            owed.hold(
                queue, receipt, min(math.ceil((until - t).total_seconds()) + 1, MAX_VISIBILITY)
            )
        if wait:
            self.follow_up(owed)
        elif owed.visibility:
            self.hide_soon(owed)

    def hide_soon(self, owed: FollowUps) -> None:
        """Visibility changes nobody waits for (a renewal's): the ledger already holds the
        lease, so they go to a background thread and never delay a worker's loop. One that
        is late or lost only lets the message resurface, to be hidden again by the receive
        rules. The thread touches SQS only, never the database."""
        try:
            self._hiding.put_nowait(owed)
        except queue_module.Full:
            logger.info("SQS visibility changes backed up; left to the receive rules")
            return
        with self.transport.lock:
            if self._hider is None or not self._hider.is_alive():
                self._hider = threading.Thread(
                    target=self._hide_loop, name="blamequeue-sqs-visibility", daemon=True
                )
                self._hider.start()

    def _hide_loop(self) -> None:
        while (owed := self._hiding.get()) is not None:
            for queue, changes in owed.visibility.items():
                try:
                    self.transport.change_visibility(queue, changes)
                except Exception as exc:  # a gone queue is noticed by the next receive
                    logger.info("SQS visibility change on %r failed: %s", queue, exc)

    def quietly(self, queue: str, what: str, call: Any) -> Any:
        try:
            return call()
        except QueueGone:
            self.queue_gone(queue)
        except Exception as exc:
            logger.warning("SQS %s on %r failed (mended on the next receive): %s", what, queue, exc)
        return None

    def show(self, rows: Sequence[tuple[str, str, str | None]]) -> None:
        """Make re-pended jobs' messages visible now; a message that is gone (its receipt
        refused) is replaced by a new one."""
        by_queue: dict[str, list[tuple[str, str | None]]] = {}
        for job_id, queue, receipt in rows:
            by_queue.setdefault(queue, []).append((job_id, receipt))
        lost: list[str] = [j for j, _, r in rows if not r]
        for queue, items in by_queue.items():
            changes = [(r, 0) for _, r in items if r]
            refused = self.quietly(
                queue,
                "visibility",
                lambda q=queue, c=changes: self.transport.change_visibility(q, c),
            )
            lost += [j for j, r in items if r and (refused is None or r in refused)]
        if lost:
            with transaction.atomic(using=self.table.db):
                self.mark_unsent(lost)
            self.send_quietly(lost)

    def _copy_to_dlq(self, ids: Sequence[str]) -> None:
        """A copy of each failed job in its queue's DLQ queue, for operators in the AWS
        console (the ledger stays the DLQ of record: ``dlq_retry`` reads it). The payload is
        left out of a copy that would not fit the DLQ queue."""
        rows = (
            self.table.jobs().filter(id__in=list(ids)).values_list(*SEND_COLUMNS, "error", "reason")
        )
        by_queue: dict[str, list[Outgoing]] = {}
        for row in rows:
            extra = {"state": "failed", "error": row[9], "reason": row[10]}
            text = messages.of_row(row[:9], extra)
            info = self.quietly(row[1], "dlq", lambda q=row[1]: self.transport.queue(q))
            if info is not None and len(text.encode()) > info.dlq_max_message_size - 100:
                stripped = (*row[:3], b"", *row[4:9])
                text = messages.of_row(stripped, {**extra, "payload_omitted": True})
            by_queue.setdefault(row[1], []).append(messages.outgoing(text, row[0]))
        for queue, batch in by_queue.items():
            self.quietly(
                queue, "dlq copy", lambda q=queue, b=batch: self.transport.send(q, b, dlq=True)
            )
