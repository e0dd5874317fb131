"""The fenced acks, shared by every backend whose jobs are rows of a Django database.

One ``UPDATE … FROM (VALUES …)`` per 500 acks, fenced by (id, token, inflight): a stale token
matches no row and changes nothing. DAG releases, cascades, child reports (recorded on the
manifest of a parent here, outboxed for a parent elsewhere) and audit rows are written in the
same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django_blamequeue import audit
from django_blamequeue.backends.jobtable import sql
from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.core.records import Ack, AckResult
from django_blamequeue.core.states import TERMINAL, State

if TYPE_CHECKING:
    from django_blamequeue.backends.jobtable.attempts import Attempts
    from django_blamequeue.backends.jobtable.flows import Flows
    from django_blamequeue.backends.jobtable.manifests import Manifests

ACK_CHUNK = 500
_TERMINAL_VALUES = frozenset(s.value for s in TERMINAL)


def _ack_row_pg(a: Ack) -> tuple[Any, ...]:
    """One row of ``sql.ack_many_postgresql``: column 8 is the retry delay, 9 unused (the
    statement reads the clock)."""
    t = a.transition
    return (
        a.job_id,
        a.token,
        t.state.value,
        t.result.body if t.result else None,
        t.error,
        t.traceback,
        t.reason.value if t.reason else None,
        t.delay if t.state == State.PENDING else None,
        None,
        int(t.give_back_attempt),
        int(t.yields_to_cancel),
        int(t.state == State.DONE),
        int(t.snoozed),
        t.error_type,
    )


def _ack_params(a: Ack, now: datetime, stamp: Any, adapt: Callable[[Any], Any]) -> list[Any]:
    """One row of ``sql.ack_many``; ``stamp`` is ``now`` adapted for the driver."""
    t = a.transition
    available = now + timedelta(seconds=t.delay) if t.state == State.PENDING else None
    return [
        a.job_id,
        a.token,
        t.state.value,
        t.result.body if t.result else None,
        t.error,
        t.traceback,
        t.reason.value if t.reason else None,
        adapt(available) if available is not None else None,
        stamp,
        int(t.give_back_attempt),
        int(t.yields_to_cancel),
        int(t.state == State.DONE),
        int(t.snoozed),
        t.error_type,
    ]


class Acks:
    """Finished attempts applied to the job table, each fenced by its lease token."""

    def __init__(
        self, table: JobTable, flows: Flows, manifests: Manifests, attempts: Attempts
    ) -> None:
        self.table = table
        self.flows = flows
        self.manifests = manifests  # a fan-out ack stores the parent's manifest
        self.attempts = attempts  # the history of the attempts the acks end

    def apply(
        self, acks: Sequence[Ack], now: datetime | None, *, planned: bool = False
    ) -> list[AckResult]:
        """The acks, inside the caller's transaction. ``planned``: the transaction already
        runs under the generic plan settings (``JobTable.plan_generic``); else the first
        PostgreSQL ack statement sets them, and the later chunks reuse them."""
        table = self.table
        applied: dict[str, tuple[Any, ...]] = {}
        fan_outs = [a for a in acks if a.transition.state == State.WAITING_CHILDREN]
        plain = [a for a in acks if a.transition.state != State.WAITING_CHILDREN]
        if fan_outs or not table.is_postgres:
            now = table.clock(now)  # PostgreSQL's plain acks read the clock in the statement
        fanned: dict[str, State | None] = {}
        if fan_outs:
            assert now is not None  # read just above
            fanned = self.manifests.apply_fan_outs(fan_outs, now)
        for start in range(0, len(plain), ACK_CHUNK):
            chunk = plain[start : start + ACK_CHUNK]
            if table.is_postgres:
                varying, params = self.rows_postgresql(chunk)
                statement = sql.ack_many_postgresql(varying, table.name)
                found = table.fetch(statement, [*params, now], generic=not planned)  # by key
                planned = True  # SET LOCAL: set for the rest of the transaction
            else:
                assert now is not None
                adapt, stamp = table.adapt, table.adapt(now)
                params = [p for ack in chunk for p in _ack_params(ack, now, stamp, adapt)]
                statement = sql.ack_many(table.connection.vendor, len(chunk), table.name)
                with table.connection.cursor() as cur:
                    cur.execute(statement, params)
                    found = cur.fetchall()
            for r in found:
                applied[r[0]] = tuple(r)
        return self.finish(acks, applied, now, fanned)

    def one_statement(self, acks: Sequence[Ack]) -> bool:
        """Can these acks go as the rows of one PostgreSQL statement (``rows_postgresql``)
        that the caller runs, then ``finish``es? No fan-out (its manifest is written first)
        and no more than one chunk."""
        return (
            self.table.is_postgres
            and 0 < len(acks) <= ACK_CHUNK
            and all(a.transition.state != State.WAITING_CHILDREN for a in acks)
        )

    @staticmethod
    def rows_postgresql(acks: Sequence[Ack]) -> tuple[tuple[bool | str, ...], list[Any]]:
        """``varying`` and params of the acks as rows (``sql.ack_many_postgresql``), ``now``
        not included."""
        return sql.unnest_params(list(zip(*map(_ack_row_pg, acks), strict=False)), joined=2)

    def finish(
        self,
        acks: Sequence[Ack],
        applied: dict[str, tuple[Any, ...]],
        now: datetime | None,
        fanned: dict[str, State | None] | None = None,
    ) -> list[AckResult]:
        """After the fenced ``UPDATE``, in its transaction: what the acks it applied
        (``applied``: their ``ACK_RETURNING`` rows by id) set off, and the answer per ack."""
        fanned = fanned or {}
        plain = [a for a in acks if a.transition.state != State.WAITING_CHILDREN]
        self._after_acks(plain, applied, now)
        answer = []
        for a in acks:
            if a.job_id in fanned:
                state = fanned[a.job_id]
                answer.append(AckResult(job_id=a.job_id, ok=state is not None, state=state))
            else:
                row = applied.get(a.job_id)
                answer.append(
                    AckResult(
                        job_id=a.job_id, ok=row is not None, state=State(row[1]) if row else None
                    )
                )
        return answer

    def _after_acks(
        self, acks: Sequence[Ack], applied: dict[str, tuple[Any, ...]], now: datetime | None
    ) -> None:
        """Same transaction as the acks: release DAG dependants, cascade cancels, the
        attempt history, audit."""
        # DAG nodes (a flow id, no parent) may have dependants; @flow children never do.
        done_in_flows = [r[0] for r in applied.values() if r[1] == State.DONE and r[3] and not r[4]]
        cancelled = [r[0] for r in applied.values() if r[1] == State.CANCELLED]
        if done_in_flows or cancelled:
            clock = self.table.clock(now)
            if done_in_flows:
                self.flows.release_dependants(done_in_flows, clock)
            if cancelled:
                self.flows.cascade_cancel(cancelled, clock)
        children = [r for r in applied.values() if r[4] and r[1] in _TERMINAL_VALUES]
        if children:
            # A parent here gets the report in this transaction; one elsewhere, through the
            # outbox. Either way exactly once: only a pending manifest row changes.
            here = [r[0] for r in children if r[7] in (self.table.alias, None)]
            recorded = self.flows.record_children(here, now) if here else set()
            if len(recorded) < len(children):
                self.flows.report_terminal([r[0] for r in children if r[0] not in recorded])
        self.table.notify(
            [
                r[2]
                for a in acks
                if (r := applied.get(a.job_id))
                and r[1] == State.PENDING
                and a.transition.delay == 0
            ]
        )
        self.attempts.after_acks(acks, applied)
        success, alias = audit.needed(audit.CONSUME_SUCCESS), self.table.alias
        events = [ev for a in acks for ev in _ack_events(a, applied.get(a.job_id), alias, success)]
        audit.record(events, using=self.table.db)


def _ack_events(
    a: Ack, row: tuple[Any, ...] | None, alias: str, success: bool = True
) -> list[audit.Event]:
    """The audit events of one ack; ``success``: is a done ack's event wanted at all."""
    if row is None:
        return [audit.lock_lost(a.job_id, alias, a.transition.state.value)]
    _, state, queue, _flow, _parent, attempts, name = row[:7]
    return audit.ack_events(
        a.transition,
        state,
        job_id=a.job_id,
        queue=queue,
        backend=alias,
        attempt=attempts,
        name=name,
        happy=success,
    )
