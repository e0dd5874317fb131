"""The SQS claim: receive messages, then lease their jobs with one fenced ledger UPDATE.

``ReceiveMessage`` hides each message for the lease (plus a second, so the ledger lease ends
first), and the UPDATE turns the received ids that are pending and due into inflight with a
fresh token, counting the attempt. A message whose job was not leased that way is sorted out
by the receive rules (docs/backends/sqs.md):

- no ledger row (purged, pruned, deleted) or a terminal one: delete the message;
- a row of another queue (the job was moved; a message was sent there): delete it;
- blocked or waiting for children: delete it (the job is sent afresh when it is released);
- pending but not due: hide it until it is (or delete it when the job is parked past SQS's
  15-minute delay: the send step sends it then);
- pending with an ``available_at`` no reader parses (SQLite keeps any text): surface it
  (``_surface``) and show the message again, so the next claim leases it and the worker
  fails it alone as ``bad_job``;
- pending (or blocked) and past its ``expires_at``: cancel the job as expired in the ledger
  and delete the message (rule: expiry);
- inflight under a live lease (a duplicate, or the holder's message back early): hide it for
  the rest of the lease, never delete it, since the holder may still crash;
- inflight with an expired lease: take it over, which is the rescue (stall + 1,
  ``core.lifecycle.rescue`` decides pending or failed) followed by a claim.

A paused or limited queue's received jobs are leased under its control row's lock
(``jobtable/limited.py``): those its limits do not allow now, or a paused queue's, are hidden
again for ``LIMIT_HOLD`` seconds, still pending, no attempt spent. A message held so often that
SQS's next receive would move it to the DLQ queue (``maxReceiveCount``) is replaced by a fresh
one instead: a long rate-limited backlog never strands a job there.
"""

from __future__ import annotations

import math
import secrets
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from itertools import count
from typing import Any

from django.db import transaction
from django.db.models import Q

from django_blamequeue import audit
from django_blamequeue.backends.jobtable.expiry import Expiry
from django_blamequeue.backends.jobtable.leases import Leases
from django_blamequeue.backends.jobtable.limited import Candidates, Gate, LimitedClaims
from django_blamequeue.backends.jobtable.rows import claimed_from_row, to_dt
from django_blamequeue.backends.jobtable.sql import CLAIM_COLUMNS, CONTROL, not_expired
from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.backends.sqs.sender import FollowUps, Sender
from django_blamequeue.backends.sqs.transport import (
    BATCH,
    MAX_DELAY,
    MAX_VISIBILITY,
    QueueGone,
    Received,
    Transport,
)
from django_blamequeue.conf import get_settings
from django_blamequeue.core import limits as rule
from django_blamequeue.core.controls import QueueLimits
from django_blamequeue.core.records import Claimed
from django_blamequeue.core.rules import expired as expired_at
from django_blamequeue.core.states import TERMINAL, State

ROUNDS = 4
#: Seconds a message is hidden again when its queue is paused or its limits are full now.
LIMIT_HOLD = 2
_TERMINAL = frozenset(s.value for s in TERMINAL)
_PARKED = frozenset({State.BLOCKED.value, State.WAITING_CHILDREN.value})
_WAITING = frozenset({State.PENDING.value, State.BLOCKED.value})
_SORT_COLUMNS = (
    "id",
    "state",
    "lease_expires_at",
    "available_at",
    "message_id",
    "sent_at",
    "attempts",
    "max_attempts",
    "stalls",
    "cancel_requested",
    "queue",
    "name",
    "alone_token",
    "lease_token",
    "expires_at",
)


def claim_statement(table: str, vendor: str, n: int, *, unlimited: bool = True) -> str:
    """Lease the received jobs that are pending and due, in one statement.

    PostgreSQL reads the clock in the statement (no round trip for it). Params: the lease
    in seconds; per message: id, token, receipt handle, message id, receive count, the queue
    it came from (a job moved to another queue since is not leased by it); then
    ``now`` (NULL: ``statement_timestamp()``); then, if ``unlimited``, the backend's alias:
    a job of a queue whose control row says limited (or paused) is left alone (rule: paused).
    SQLite: the lease's expiry, now, now; the messages; now, now (times as stored text); the
    alias. An expired job is never leased (rule: expiry): the receive rules cancel it.
    """
    guard = (
        f" AND NOT EXISTS (SELECT 1 FROM {CONTROL} k WHERE k.backend = %s "
        f"AND k.queue = {table}.queue AND k.limited)"
        if unlimited
        else ""
    )
    sets = (
        f"state = 'inflight', attempts = {table}.attempts + 1, lease_token = v.column2, "
        "receipt_handle = v.column3, message_id = v.column4, receive_count = v.column5, "
    )
    if vendor == "postgresql":
        row = "(%s::varchar, %s::varchar, %s::text, %s::varchar, %s::integer, %s::varchar)"
        columns = "column1, column2, column3, column4, column5, column6"
        values = f"(VALUES {', '.join([row] * n)}) AS v({columns})"
        clock = "(SELECT COALESCE(%s::timestamptz, statement_timestamp()) AS now) AS c"
        return (
            f"UPDATE {table} SET {sets}lease_expires_at = c.now + make_interval(secs => %s), "
            f"started_at = c.now, updated_at = c.now FROM {values}, {clock} "
            f"WHERE {table}.id = v.column1 AND {table}.queue = v.column6 "
            f"AND {table}.state = 'pending' "
            f"AND {table}.available_at <= c.now AND {not_expired('c.now', table)}{guard} "
            f"RETURNING {CLAIM_COLUMNS}"
        )
    values = f"(VALUES {', '.join(['(%s, %s, %s, %s, %s, %s)'] * n)}) AS v"
    return (
        f"UPDATE {table} SET {sets}lease_expires_at = %s, started_at = %s, updated_at = %s "
        f"FROM {values} WHERE {table}.id = v.column1 AND {table}.queue = v.column6 "
        f"AND {table}.state = 'pending' "
        f"AND {table}.available_at <= %s AND {not_expired('%s', table)}{guard} "
        f"RETURNING {CLAIM_COLUMNS}"
    )


class Receiver:
    """The SQS backend's claim: messages received, their jobs leased in the ledger."""

    #: Which queue a receive starts with, in turn (shared by every backend of the process).
    _turn = count()

    def __init__(
        self,
        table: JobTable,
        transport: Transport,
        sender: Sender,
        leases: Leases,
        limited: LimitedClaims,
        expiry: Expiry,
    ) -> None:
        self.table = table
        self.transport = transport
        self.sender = sender  # what SQS is owed once the claim's transaction commits
        self.leases = leases  # an expired lease met by its message is rescued first
        self.limited = limited  # a limited queue's jobs are leased under its control row
        self.expiry = expiry  # a message of an expired job cancels it

    def claim(
        self,
        queues: Sequence[str],
        limit: int,
        lease_s: float,
        now: datetime | None = None,
        *,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> list[Claimed]:
        if limit <= 0 or not queues:
            return []
        visibility = min(math.ceil(lease_s) + 1, MAX_VISIBILITY)
        claimed: list[Claimed] = []
        # Messages that lease nothing (a cancelled or purged job's, a duplicate) take up a
        # receive: receive again while the queues gave all that was asked, a few rounds,
        # within a time budget (the worker renews its leases between claims).
        budget = time.monotonic() + min(1.0, lease_s / 4)
        for _ in range(ROUNDS):
            want = limit - len(claimed)
            got = self._receive(queues, want, visibility)
            claimed += self._lease_received(got, lease_s, now, limits or {})
            if len(got) < want or len(claimed) >= limit or time.monotonic() > budget:
                break
        return claimed

    def _lease_received(
        self,
        got: Sequence[Received],
        lease_s: float,
        now: datetime | None,
        limits: Mapping[str, QueueLimits],
    ) -> list[Claimed]:
        """One transaction over the ledger for the received messages, then what SQS is owed."""
        owed = FollowUps()
        received = []
        for m in got:
            if m.job_id is None:  # not one of ours (or mangled): it can never run
                owed.remove(m.queue, m.receipt)
            else:
                received.append(m)
        claimed: list[Claimed] = []
        if received:
            with transaction.atomic(using=self.table.db):
                claimed = self._lease(received, lease_s, now, owed, limits)
                self._audit_starts(claimed)
        self.sender.follow_up(owed)
        return claimed

    def _receive(self, queues: Sequence[str], limit: int, visibility: int) -> list[Received]:
        """Up to ``limit`` messages, the queues taken in turn (a different one first each
        call, so a busy queue cannot starve the others)."""
        start = next(self._turn) % len(queues)
        found: list[Received] = []
        for queue in [*queues[start:], *queues[:start]]:
            while len(found) < limit:
                want = min(BATCH, limit - len(found))
                try:
                    got = self.transport.receive(queue, want, visibility)
                except QueueGone:
                    self.sender.queue_gone(queue)
                    break
                found += got
                if len(got) < want:
                    break
        return found

    def _lease(
        self,
        received: Sequence[Received],
        lease_s: float,
        now: datetime | None,
        owed: FollowUps,
        limits: Mapping[str, QueueLimits],
    ) -> list[Claimed]:
        """Inside the claim's transaction: lease what can be leased, sort out the rest."""
        first: dict[str, Received] = {}
        rest: list[Received] = []
        for m in received:
            assert m.job_id is not None
            if m.job_id in first:
                rest.append(m)  # two messages of one job in one receive: one may lease it
            else:
                first[m.job_id] = m
        claimed, held = self._claim_gated(list(first.values()), lease_s, now, limits)
        self._hold(held, owed)
        leased = {c.job_id for c in claimed} | {m.job_id for m in held}
        leftovers = [m for m in first.values() if m.job_id not in leased] + rest
        if leftovers:
            claimed += self._sort_out(leftovers, lease_s, self.table.clock(now), owed, limits)
        return claimed

    def _claim_gated(
        self,
        received: Sequence[Received],
        lease_s: float,
        now: datetime | None,
        limits: Mapping[str, QueueLimits],
    ) -> tuple[list[Claimed], list[Received]]:
        """Lease received jobs: those of queues named in ``limits`` under their limits (the
        rest of them answered as held), the others unlimited."""
        free = [m for m in received if m.queue not in limits]
        claimed = self._claim_messages(free, lease_s, now) if free else []
        held: list[Received] = []
        by_queue: dict[str, list[Received]] = {}
        for m in received:
            if m.queue in limits:
                by_queue.setdefault(m.queue, []).append(m)
        self.limited.lock_names(limits, list(by_queue))  # before any queue's row
        for queue in sorted(by_queue):
            got, waiting = self._claim_limited_messages(
                queue, by_queue[queue], lease_s, now, limits[queue]
            )
            claimed += got
            held += waiting
        return claimed, held

    def _claim_limited_messages(
        self,
        queue: str,
        received: Sequence[Received],
        lease_s: float,
        now: datetime | None,
        defaults: QueueLimits,
    ) -> tuple[list[Claimed], list[Received]]:
        """Under the queue's control-row lock: the received jobs its limits allow now, in
        the order SQS delivered them (rule: limits); the others are held."""
        looked = self.limited.gate(queue, defaults, now)
        gate = looked[0] if looked is not None else None
        rows = (
            list(
                self.table.jobs()
                .filter(
                    Q(expires_at__isnull=True) | Q(expires_at__gt=gate.now),  # rule: expiry
                    id__in=[m.job_id for m in received],
                    queue=queue,
                    state=State.PENDING,
                    available_at__lte=gate.now,
                )
                .values_list("id", "concurrency_key", "name")
            )
            if gate is not None
            else []
        )
        due = {job_id: key for job_id, key, _ in rows}
        if gate is None or not due:
            return [], [m for m in received if gate is None or m.job_id in due]
        candidates = [(m.job_id or "", due[m.job_id]) for m in received if m.job_id in due]
        names = {job_id: name for job_id, _, name in rows}
        if gate.limits.key_weights:
            ids = self._shares(gate, candidates, names)
        else:
            ids = set(
                rule.claimable(
                    candidates,
                    limit=len(candidates),
                    limits=gate.limits,
                    counted=gate.counted,
                    names=names,
                )
            )
        picked = [m for m in received if m.job_id in ids]
        claimed = self._claim_messages(picked, lease_s, gate.now, unlimited=False) if picked else []
        self.limited.record_starts(gate, claimed)
        return claimed, [m for m in received if m.job_id in due and m.job_id not in ids]

    def _shares(self, gate: Gate, received: Candidates, names: dict[str, str]) -> set[str]:
        """rule: shares — SQS delivers what it will, so the weighted pick runs on the ledger:
        the received jobs plus every waiting key's first ones compete (``by_share``), and of
        the received jobs each key gets as many as that pick gave it; the rest are held until
        a later receive brings the keys whose turn it is."""
        room = rule.room(len(received), gate.limits, gate.counted)
        if room <= 0:
            return set()
        gate.names.update(names)
        waiting = self.limited.waiting_keys(gate, room, received)
        picks = rule.claimable(
            [*received, *waiting],
            limit=len(received),
            limits=gate.limits,
            counted=gate.counted,
            names=gate.names,
        )
        key_of = dict([*received, *waiting])
        turns = Counter(key_of[job_id] for job_id in picks)
        ids: set[str] = set()
        for job_id, key in received:
            if turns[key] > 0:
                turns[key] -= 1
                ids.add(job_id)
        return ids

    def _claim_messages(
        self,
        received: Sequence[Received],
        lease_s: float,
        now: datetime | None,
        *,
        unlimited: bool = True,
    ) -> list[Claimed]:
        a = self.table.adapt
        claimed: list[Claimed] = []
        t = None if self.table.is_postgres else self.table.clock(now)
        for start in range(0, len(received), 500):
            chunk = received[start : start + 500]
            params: list[Any] = (
                [lease_s] if t is None else [a(t + timedelta(seconds=lease_s)), a(t), a(t)]
            )
            for m in chunk:
                params += [
                    m.job_id,
                    secrets.token_hex(16),
                    m.receipt,
                    m.message_id,
                    m.receive_count,
                    m.queue,
                ]
            params += [now] if t is None else [a(t), a(t)]
            if unlimited:
                params.append(self.table.alias)
            statement = claim_statement(
                self.table.name, self.table.connection.vendor, len(chunk), unlimited=unlimited
            )
            with self.table.connection.cursor() as cur:
                cur.execute(statement, params)
                claimed += [claimed_from_row(r) for r in cur.fetchall()]
        return claimed

    def _sort_out(
        self,
        leftovers: Sequence[Received],
        lease_s: float,
        t: datetime,
        owed: FollowUps,
        limits: Mapping[str, QueueLimits],
    ) -> list[Claimed]:
        """The receive rules for messages that did not lease their job (module docstring)."""
        ids = sorted({m.job_id for m in leftovers if m.job_id})
        rows = {r[0]: r for r in self.table.jobs().filter(id__in=ids).values_list(*_SORT_COLUMNS)}
        gated = self._gated_queues({m.queue for m in leftovers} - set(limits))
        expired: dict[str, tuple[Received, tuple[Any, ...]]] = {}
        gone = {r[0] for r in rows.values() if r[1] in _WAITING and expired_at(to_dt(r[14]), t)}
        if gone:  # rule: expiry — cancelled in the ledger, their messages deleted
            self.expiry.expire_ids(sorted(gone), t)
        for m in leftovers:
            row = rows.get(m.job_id or "")
            state = row[1] if row is not None else None
            moved = row is not None and row[10] != m.queue  # its message there was sent anew
            if row is None or moved or state in _TERMINAL or state in _PARKED or row[0] in gone:
                owed.remove(m.queue, m.receipt)
            elif state == State.PENDING and m.queue in gated:  # seen as unlimited: stale view
                self._hold([m], owed)
            elif state == State.PENDING:
                self._pending_message(m, row, t, owed)
            elif (to_dt(row[2]) or t) >= t:  # inflight, lease live: hold, never delete
                owed.hold(m.queue, m.receipt, _seconds(to_dt(row[2]), t) + 1)
                if m.message_id == row[4]:  # the holder's own message, back early
                    self.table.jobs().filter(id=row[0], message_id=m.message_id).update(
                        receipt_handle=m.receipt
                    )
            elif row[0] in expired:
                owed.hold(m.queue, m.receipt, math.ceil(lease_s) + 1)
            else:
                expired[row[0]] = (m, (row[0], *row[6:14]))  # leases.RESCUE_COLUMNS
        return self._take_over(expired, lease_s, t, owed, limits) if expired else []

    def _gated_queues(self, queues: set[str]) -> set[str]:
        """The queues among ``queues`` whose control row says paused or limited."""
        if not queues:
            return set()
        with self.table.connection.cursor() as cur:
            cur.execute(
                f"SELECT queue FROM {CONTROL} WHERE backend = %s AND limited "
                f"AND queue IN ({', '.join(['%s'] * len(queues))})",
                [self.table.alias, *sorted(queues)],
            )
            return {r[0] for r in cur.fetchall()}

    def _pending_message(
        self, m: Received, row: tuple[Any, ...], t: datetime, owed: FollowUps
    ) -> None:
        try:
            available = to_dt(row[3])
        except ValueError:
            available = None
        if available is None:  # the column is NOT NULL: stored text no reader parses
            self._surface(row[0])
            owed.hold(m.queue, m.receipt, 0)  # the next receive leases it, to fail as bad_job
            return
        if available <= t:  # pending and due, changed under our UPDATE: receive it again
            owed.hold(m.queue, m.receipt, 0)
        elif (available - t).total_seconds() > MAX_DELAY and row[5] is None:
            owed.remove(m.queue, m.receipt)  # parked: the send step sends it when due
        else:
            owed.hold(m.queue, m.receipt, _seconds(available, t))

    def _surface(self, job_id: str) -> None:
        """Give an unreadable ``available_at`` a leading space, which sorts before every
        time: the claim's ``available_at <= now`` then leases the job, and the worker, which
        reads each field on its own, fails it alone as ``bad_job`` (as the job table's
        backlog does for its own rows). Left as it was, it would wait for ever."""
        table = self.table
        with table.connection.cursor() as cur:
            cur.execute(
                f"UPDATE {table.name} SET available_at = ' ' || CAST(available_at AS TEXT) "
                "WHERE id = %s AND state = 'pending' AND available_at NOT LIKE ' %%'",
                [job_id],
            )

    def _take_over(
        self,
        expired: dict[str, tuple[Received, tuple[Any, ...]]],
        lease_s: float,
        t: datetime,
        owed: FollowUps,
        limits: Mapping[str, QueueLimits],
    ) -> list[Claimed]:
        """Expired leases met by their message: rescue them, then lease those re-pended."""
        max_stalled = get_settings().max_stalled_count
        groups = self.leases.rescue_rows([row for _, row in expired.values()], t, max_stalled)
        for job_id in [r[0] for s in (State.FAILED, State.CANCELLED) for r in groups[s]]:
            owed.remove(expired[job_id][0].queue, expired[job_id][0].receipt)
        owed.to_dlq += [r[0] for r in groups[State.FAILED]]
        again = [expired[r[0]][0] for r in groups[State.PENDING]]
        if not again:
            return []
        claimed, held = self._claim_gated(again, lease_s, t, limits)
        self._hold(held, owed)
        return claimed

    def _hold(self, held: Sequence[Received], owed: FollowUps) -> None:
        """Hide refused messages for ``LIMIT_HOLD``; one SQS has received nearly
        ``maxReceiveCount`` times is deleted and its job sent afresh once this commits."""
        fresh = []
        for m in held:
            if m.receive_count + 1 >= self.transport.max_receive_count:
                owed.remove(m.queue, m.receipt)
                fresh.append(m.job_id or "")
            else:
                owed.hold(m.queue, m.receipt, LIMIT_HOLD)
        if fresh:
            self.sender.mark_unsent(fresh)
            owed.send += fresh

    def _audit_starts(self, claimed: Sequence[Claimed]) -> None:
        if claimed:
            audit.record(audit.start_events(claimed, self.table.alias), using=self.table.db)


def _seconds(until: datetime | None, t: datetime) -> int:
    """Whole seconds from ``t`` to ``until`` (at least 1), within SQS's 12-hour cap."""
    if until is None:
        return 1
    return max(1, min(math.ceil((until - t).total_seconds()), MAX_VISIBILITY))
