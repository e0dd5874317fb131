"""The SQS backend's shared state: the transport, the ledger's send bookkeeping, and the SQS
calls that follow a ledger commit.

The rule every verb keeps: a ``pending`` ledger row needs a live message, and ``sent_at``
says whether one was sent. A transaction that leaves a job pending without a message sets
``sent_at`` NULL in that same transaction and sends after its commit; the send is marked
only once SQS has accepted it. A crash between the two leaves ``sent_at`` NULL, so the send
step (``send_due``, run by the relay and the sweeper) sends it again once ``SEND_GRACE`` has
passed. Sending twice is harmless: the receive rules hold or delete a second message.
"""

from __future__ import annotations

import logging
import queue as queue_module
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.exceptions import HTTPClientError
from django.db import InterfaceError, OperationalError, transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from django_blamequeue.backends import wakeup
from django_blamequeue.backends.jobtable.base import LedgerBase
from django_blamequeue.backends.jobtable.rows import to_dt
from django_blamequeue.backends.sqs import messages
from django_blamequeue.backends.sqs.messages import SEND_COLUMNS
from django_blamequeue.backends.sqs.transport import (
    MAX_DELAY,
    Outgoing,
    QueueGone,
    SqsUnavailable,
    Transport,
)
from django_blamequeue.conf import BackendConfig
from django_blamequeue.core.states import State
from django_blamequeue.models import SqsJob

logger = logging.getLogger("django_blamequeue.sqs")
CHUNK = 500
REFRESH_EVERY = 300.0  # seconds between two looks for messages near their retention
MARK_EVERY = 100  # messages sent between two records of what was sent

#: Errors that mean SQS (or the ledger's database) cannot be reached.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    OperationalError,
    InterfaceError,
    BotoConnectionError,
    HTTPClientError,
    SqsUnavailable,
)


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


class SqsBase(LedgerBase):
    protocol = "sqs"
    model = SqsJob
    transactional_enqueue = False
    supports_flows = True
    supports_priority = False  # SQS delivers in its own order; priority is stored and shown
    supports_time_travel = False  # visibility and delays run on AWS's clock
    supports_key_order = False  # limits lease among the messages SQS delivers, in its order
    sends_later = True  # the ledger's unsent rows: ``send_unsent`` sends them
    unavailable_errors = UNAVAILABLE

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self.transport = Transport(config.options)
        self.send_grace = float(config.options.get("SEND_GRACE") or 30.0)
        self._next_refresh = 0.0
        self._hiding: queue_module.Queue[FollowUps | None] = queue_module.Queue(maxsize=1000)
        self._hider: threading.Thread | None = None

    def close(self) -> None:
        if self._hider is not None:
            self._hiding.put(None)
        self.transport.close()

    def _notify(self, queues: Sequence[str]) -> None:
        """Wake this process's idle consumers on commit (SQS has no push: others poll)."""
        distinct = sorted(set(queues))
        if distinct:
            transaction.on_commit(lambda: wakeup.notify(distinct), using=self.db)

    def _made_pending(self, rows: Sequence[tuple[str, str]], now: datetime) -> None:
        """Jobs made pending from a state without a message (a DAG release, a settled flow
        parent, a DLQ retry): unsent in this transaction, sent once it commits."""
        ids = [job_id for job_id, _ in rows]
        if not ids:
            return
        self._mark_unsent(ids)
        transaction.on_commit(lambda: self._send_quietly(ids, now), using=self.db)

    # -- the ledger's send bookkeeping -------------------------------------------------------
    def _mark_unsent(self, ids: Sequence[str]) -> None:
        for start in range(0, len(ids), CHUNK):
            chunk = list(ids[start : start + CHUNK])
            self.jobs().filter(id__in=chunk).exclude(sent_at=None).update(sent_at=None)

    def _mark_sent(self, ids: Iterable[str], read_at: datetime | None = None) -> None:
        """Record the sends (one autocommit UPDATE per 500), unless the row changed since it
        was read: its state may no longer be the one the message was sent for (a claim, a
        retry that deleted this very message). Unchanged means ``updated_at`` not after
        ``read_at``, or with no ``read_at`` (a row just inserted) still its ``created_at``."""
        ids = list(ids)
        if not ids:
            return
        unchanged = Q(updated_at=F("created_at")) if read_at is None else Q(updated_at__lte=read_at)
        marks = [
            self.jobs().filter(unchanged, id__in=ids[start : start + CHUNK], sent_at=None)
            for start in range(0, len(ids), CHUNK)
        ]
        if not self.is_postgres or self.connection.in_atomic_block:
            for qs in marks:
                qs.update(sent_at=Now())
            return
        with transaction.atomic(using=self.db):
            # A mark lost in a crash costs one duplicate message, never a job: it need not
            # wait for the WAL flush (which was half of an enqueue's time on PostgreSQL).
            with self.connection.cursor() as cur:
                cur.execute("SET LOCAL synchronous_commit TO OFF")
            for qs in marks:
                qs.update(sent_at=Now())

    def _send_quietly(self, ids: Sequence[str], now: datetime | None = None) -> None:
        """After a commit: send, or leave it to the send step (``sent_at`` stays NULL)."""
        try:
            self._send_ids(ids, now)
        except Exception as exc:
            logger.warning("SQS send of %d job(s) deferred to the send step: %s", len(ids), exc)

    def _send_ids(self, ids: Sequence[str], now: datetime | None = None) -> int:
        """Send the messages of these jobs if they are still pending and unsent."""
        t = self._now(now)
        sent = 0
        for start in range(0, len(ids), CHUNK):
            rows = list(
                self.jobs()
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
                ids = self._send_to(queue, batch[start : start + MARK_EVERY])
                self._mark_sent(ids, t)
                sent += len(ids)
            wakeup.notify([queue])
        return sent

    def _send_to(self, queue: str, batch: Sequence[Outgoing]) -> set[str]:
        try:
            return self.transport.send(queue, batch)
        except QueueGone:
            self._queue_gone(queue)
            return self.transport.send(queue, batch)

    def _queue_gone(self, queue: str) -> None:
        """The queue was deleted or the emulator restarted, taking every message with it:
        recreate it and mark its pending jobs unsent. The send step sends them again on its
        next pass (in the sweeper's thread: never a worker's loop, which holds leases)."""
        logger.warning("SQS queue for %r is gone; recreating it and re-sending its jobs", queue)
        self.transport.queue(queue)
        self.jobs().filter(queue=queue, state=State.PENDING).exclude(sent_at=None).update(
            sent_at=None
        )

    def send_due(self, now: datetime | None = None, limit: int = 500) -> int:
        """The send step: pending jobs with no live message, due within 15 minutes, that no
        sender has touched for ``SEND_GRACE`` (so it never races the enqueue about to send
        them, nor another pass of itself). Answers how many were sent."""
        t = self._now(now)
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
        n: int = self.jobs().filter(state=State.PENDING, sent_at__lt=old).update(sent_at=None)
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
        qs = self.jobs().filter(
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
        a = self._adapt
        statement = (
            f"UPDATE {self.table} SET updated_at = %s WHERE id IN ({', '.join(['%s'] * len(ids))}) "
            "AND state = 'pending' AND sent_at IS NULL AND updated_at <= %s "
            f"RETURNING {', '.join(SEND_COLUMNS)}"
        )
        with self.connection.cursor() as cur:
            cur.execute(statement, [a(t), *ids, a(untouched_since)])
            return [tuple(r) for r in cur.fetchall()]

    def send_unsent(self, limit: int = 500) -> int:
        return self.send_due(limit=limit)

    # -- after a ledger commit ---------------------------------------------------------------
    def _follow_up(self, owed: FollowUps) -> None:
        """The SQS calls a committed ledger change owes. A failure is logged, not raised:
        it is a crash at this point, which the receive rules and the send step mend (a
        message not deleted reappears and is deleted then; one not hidden is held then)."""
        for queue, receipts in owed.delete.items():
            self._quietly(queue, "delete", lambda q=queue, r=receipts: self.transport.delete(q, r))
        for queue, changes in owed.visibility.items():
            refused = self._quietly(
                queue,
                "visibility",
                lambda q=queue, c=changes: self.transport.change_visibility(q, c),
            )
            if refused:
                logger.info("SQS refused %d visibility change(s) on %r", len(refused), queue)
        if owed.to_dlq:
            self._copy_to_dlq(owed.to_dlq)
        if owed.send:
            self._send_quietly(owed.send)

    def _hide_soon(self, owed: FollowUps) -> None:
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

    def _quietly(self, queue: str, what: str, call: Any) -> Any:
        try:
            return call()
        except QueueGone:
            self._queue_gone(queue)
        except Exception as exc:
            logger.warning("SQS %s on %r failed (mended on the next receive): %s", what, queue, exc)
        return None

    def _copy_to_dlq(self, ids: Sequence[str]) -> None:
        """A copy of each failed job in its queue's DLQ queue, for operators in the AWS
        console (the ledger stays the DLQ of record: ``dlq_retry`` reads it). The payload is
        left out of a copy that would not fit the DLQ queue."""
        rows = self.jobs().filter(id__in=list(ids)).values_list(*SEND_COLUMNS, "error", "reason")
        by_queue: dict[str, list[Outgoing]] = {}
        for row in rows:
            extra = {"state": "failed", "error": row[9], "reason": row[10]}
            text = messages.of_row(row[:9], extra)
            info = self._quietly(row[1], "dlq", lambda q=row[1]: self.transport.queue(q))
            if info is not None and len(text.encode()) > info.dlq_max_message_size - 100:
                stripped = (*row[:3], b"", *row[4:9])
                text = messages.of_row(stripped, {**extra, "payload_omitted": True})
            by_queue.setdefault(row[1], []).append(messages.outgoing(text, row[0]))
        for queue, batch in by_queue.items():
            self._quietly(
                queue, "dlq copy", lambda q=queue, b=batch: self.transport.send(q, b, dlq=True)
            )
