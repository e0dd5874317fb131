"""Parent/child flows in the job table: child reports, settles and cascades.

A child's terminal ack records its report on the manifest row of a parent on this backend in
the ack's own transaction; every other terminal transition — a child of a parent elsewhere,
a rescue, a cascade, a cancel — writes its report to the outbox in its transaction, and the
relay delivers it. Either way a report is recorded once: only a ``pending`` row changes.

Settling is never done by an ack: an ack locks child rows, a settle locks the parent and
then cascades into child rows, and the two orders could deadlock. Once an ack that recorded
reports commits, the relay settles those parents in a transaction of its own (it reads the
ack's commit, so the last report of a flow always finds nothing pending); the flow sweeper
settles what a crash in between left. A settle locks its parents first, ancestors first
(``flow_depth``, then id), the order in which a cancel walks down a tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction

from django_blamequeue import audit
from django_blamequeue.backends.jobtable import flowsql
from django_blamequeue.backends.jobtable.base import LedgerBase
from django_blamequeue.core import wire
from django_blamequeue.core.records import Report
from django_blamequeue.core.rules import fails_fast
from django_blamequeue.core.states import TERMINAL, State
from django_blamequeue.models import FlowDependency, OutboxEntry

_TERMINAL = [s.value for s in TERMINAL]
REPORT = audit.FLOW_REPORT
CASCADE = audit.FLOW_CASCADE
REPORT_CHUNK = 500


class ChildReports(LedgerBase):
    # -- reports ---------------------------------------------------------------------------
    def report_terminal(self, ids: Sequence[str]) -> int:
        """Outbox a report for each terminal child among ``ids`` (same transaction)."""
        rows = list(
            self.jobs()
            .filter(id__in=list(ids), parent_id__isnull=False, state__in=_TERMINAL)
            .values_list(
                "id", "parent_id", "parent_backend", "state", "result", "content_type", "error"
            )
        )
        self._outbox(
            [
                (
                    "report",
                    parent_backend or self.alias,
                    job_id,
                    wire.report_to_body(
                        Report(
                            parent_id=parent_id,
                            child_id=job_id,
                            state=state,
                            result=bytes(result)
                            if result is not None and state == State.DONE
                            else None,
                            result_type=ctype,
                            error=error if state != State.DONE else None,
                        )
                    ),
                )
                for job_id, parent_id, parent_backend, state, result, ctype, error in rows
            ]
        )
        return len(rows)

    def lock_parents(self, parent_ids: Sequence[str]) -> None:
        """Lock these parents' rows, ancestors first (see the module's lock order), so one
        parent settles in one transaction at a time and a relay recording reports cannot miss
        another's (READ COMMITTED: the second one waits, then reads the first one's commit).
        SQLite serialises writers."""
        if not parent_ids or not self.is_postgres:
            return
        list(
            self.jobs()
            .filter(id__in=sorted(set(parent_ids)))
            .select_for_update()
            .order_by("flow_depth", "id")
            .values_list("id", flat=True)
        )

    def deliver_reports(self, reports: Sequence[Report], now: datetime | None = None) -> int:
        """Record reports on the parents' rows (once: only a pending row changes); settle."""
        recorded: list[tuple[str, str, str]] = []
        with transaction.atomic(using=self.db):
            t = self._now(now)
            self.lock_parents([r.parent_id for r in reports])
            unique = {(r.parent_id, r.child_id): r for r in reversed(reports)}  # first one wins
            batch = list(unique.values())
            for start in range(0, len(batch), REPORT_CHUNK):
                chunk = batch[start : start + REPORT_CHUNK]
                params: list[Any] = [self._adapt(t)]
                for r in chunk:
                    params += [r.parent_id, r.child_id, r.state, r.result, r.result_type, r.error]
                with self.connection.cursor() as cur:
                    cur.execute(flowsql.record_reports(self.connection.vendor, len(chunk)), params)
                    recorded += cur.fetchall()
            self._audit_reports(recorded)
            if recorded:  # the parents are locked: settle here
                self.settle(sorted({parent_id for parent_id, _, _ in recorded}), t)
        return len(recorded)

    def record_children(self, child_ids: Sequence[str], now: datetime | None) -> set[str]:
        """Record the reports of these terminal children, whose parents are on this backend,
        straight from their rows, in the caller's transaction; the relay settles the parents
        once it commits. Only manifest rows still pending change; answers the children
        recorded."""
        recorded: list[tuple[str, str, str]] = []
        for start in range(0, len(child_ids), REPORT_CHUNK):
            chunk = list(child_ids[start : start + REPORT_CHUNK])
            with self.connection.cursor() as cur:
                if self.is_postgres:
                    statement = flowsql.record_children_postgresql(self.table)
                    cur.execute(statement, [chunk, now])  # None: the statement's clock
                else:
                    statement = flowsql.record_children_sqlite(len(chunk), self.table)
                    cur.execute(statement, [self._adapt(self._now(now)), *chunk])
                recorded += cur.fetchall()
        self._audit_reports(recorded)
        parents = sorted({parent_id for parent_id, _, _ in recorded})
        if parents:
            hooks = self.hooks
            transaction.on_commit(lambda: hooks.settle_soon(self.alias, parents), using=self.db)
        return {child_id for _, child_id, _ in recorded}

    def settle_reported(self, parent_ids: Sequence[str], now: datetime | None = None) -> list[str]:
        """Settle those of these parents that are due, in a transaction of its own: the
        relay's step after an ack that recorded reports. A read finds the due ones; they are
        locked and checked again before anything changes."""
        with transaction.atomic(using=self.db):
            if not self.is_postgres or now is not None:  # SQLite: one writer at a time
                self.lock_parents(parent_ids)
                return self.settle(parent_ids, self._now(now))
            found: list[tuple[str, str, datetime]] = []
            ids = sorted(set(parent_ids))
            for start in range(0, len(ids), REPORT_CHUNK):
                chunk = ids[start : start + REPORT_CHUNK]
                with self.connection.cursor() as cur:  # due, locked in order, re-pended
                    cur.execute(flowsql.settle_due_postgresql(self.table), [chunk])
                    found += cur.fetchall()
            if not found:
                return []
            return self._settled([(job_id, queue) for job_id, queue, _ in found], found[0][2])

    def _audit_reports(self, rows: Sequence[tuple[str, str, str]]) -> None:
        """Audit the reports just recorded: (parent, child, state); a duplicate changed
        nothing and is not among them."""
        audit.record(
            [
                audit.Event(
                    action=REPORT,
                    job_id=child_id,
                    backend=self.alias,
                    data={"parent_id": parent_id, "state": state},
                )
                for parent_id, child_id, state in rows
            ],
            using=self.db,
        )

    def _due(self, parent_ids: Sequence[str]) -> list[str]:
        """The waiting parents among these with no pending child, or with a failure under
        ``"fail"``. EXISTS stops at the first row: a wide flow is not counted each time.
        Once due, a parent stays due until it settles (a report never becomes pending)."""
        due: list[str] = []
        ids = sorted(set(parent_ids))
        for start in range(0, len(ids), REPORT_CHUNK):
            chunk = ids[start : start + REPORT_CHUNK]
            with self.connection.cursor() as cur:
                cur.execute(flowsql.due_parents(len(chunk), self.table), chunk)
                due += [row[0] for row in cur.fetchall()]
        return due

    def settle(self, parent_ids: Sequence[str], now: datetime) -> list[str]:
        """Re-pend parents with no pending child, or with a failure under ``"fail"``; the
        caller holds their locks (``lock_parents``)."""
        due = self._due(parent_ids)
        return self._settle_due(due, now) if due else []

    def _settle_due(self, due: Sequence[str], now: datetime) -> list[str]:
        """Re-pend these due parents (locked by the caller) that still wait."""
        rows: list[tuple[str, str]] = []
        stamp = self._adapt(now)
        for start in range(0, len(due), REPORT_CHUNK):
            chunk = list(due[start : start + REPORT_CHUNK])
            with self.connection.cursor() as cur:
                cur.execute(flowsql.settle_parents(len(chunk), self.table), [stamp, stamp, *chunk])
                rows += [(r[0], r[1]) for r in cur.fetchall()]
        return self._settled(rows, now) if rows else []

    def _settled(self, rows: Sequence[tuple[str, str]], now: datetime) -> list[str]:
        """After re-pending these (parent, queue): wake their workers, audit the settles with
        the children's tally, cascade the fail-fast ones."""
        settled = [job_id for job_id, _ in rows]
        tally: dict[str, dict[str, int]] = {p: {} for p in settled}  # for the audit event
        for start in range(0, len(settled), REPORT_CHUNK):
            chunk = settled[start : start + REPORT_CHUNK]
            with self.connection.cursor() as cur:
                cur.execute(flowsql.tally_children(len(chunk)), chunk)
                for job_id, status, n in cur.fetchall():
                    tally[job_id][status] = n
        fail_fast = [p for p in settled if tally[p].get("pending")]
        self._made_pending(list(rows), now)
        audit.record(
            [
                audit.Event(
                    action=audit.FLOW_SETTLE,
                    job_id=p,
                    queue=queue,
                    backend=self.alias,
                    data={"children": tally[p], "fail_fast": p in fail_fast},
                )
                for p, queue in rows
            ],
            using=self.db,
        )
        if fail_fast:
            self.cascade_children(fail_fast, now)
        return settled

    def cascade_children(self, parent_ids: Sequence[str], now: datetime) -> int:
        """Cancel the unfinished children (pending, blocked and in flight) of these parents.

        Children here are cancelled in this transaction; children on other backends once it
        commits (a crash in between is mended by the flow sweeper, which cascades again).
        """
        n, remote = self._cascade_here(parent_ids, now)
        if remote:
            hooks = self.hooks
            transaction.on_commit(lambda: hooks.cancel_elsewhere(remote), using=self.db)
        return n + len(remote)

    def _cascade_here(
        self, parent_ids: Sequence[str], now: datetime
    ) -> tuple[int, list[tuple[str, str]]]:
        """Cancel these parents' unfinished children here, in the caller's transaction, and
        audit the cascade; answers how many, and the unreported children elsewhere."""
        n = self.cascade_cancel(list(parent_ids), now)
        remote = self._remote_unreported(parent_ids)
        if n or remote:
            audit.record(
                [audit.Event(action=CASCADE, job_id=p, backend=self.alias) for p in parent_ids],
                using=self.db,
            )
        return n, remote

    def _remote_unreported(self, parent_ids: Sequence[str]) -> list[tuple[str, str]]:
        """(backend, child id) of these parents' unreported children on other backends."""
        return list(
            FlowDependency.objects.using(self.db)
            .filter(job_id__in=list(parent_ids), kind="child", status="pending")
            .exclude(spec__backend=self.alias)
            .values_list("spec__backend", "depends_on_id")
        )

    def unsent_for(self, job_ids: Sequence[str], kind: str) -> set[str]:
        return set(
            OutboxEntry.objects.using(self.db)
            .filter(job_id__in=list(job_ids), kind=kind, sent_at__isnull=True)
            .values_list("job_id", flat=True)
        )

    def cascade_due(self, limit: int) -> list[str]:
        return self._settled_with_live_children(limit)

    def cascade(
        self, parent_id: str, now: datetime | None = None
    ) -> tuple[int, list[tuple[str, str]]]:
        with transaction.atomic(using=self.db):
            n, remote = self._cascade_here([parent_id], self._now(now))
        return n, remote

    def _settled_with_live_children(self, limit: int) -> list[str]:
        """Parents here that settled fail-fast or were cancelled while children still run
        (rule: cascade).

        Parents still waiting are left out in SQL, so a crowd of healthy flows never hides
        the few that need a cascade.
        """
        waiting = self.jobs().filter(state=State.WAITING_CHILDREN).values("id")
        # This backend's settled parents only: another backend's rows may share the table of
        # flow rows (the SQS ledger in the local backend's database).
        settled = self.jobs().filter(flow_phase__isnull=False).exclude(state=State.WAITING_CHILDREN)
        parent_ids = set(
            self.jobs()
            .filter(parent_id__isnull=False, parent_backend=self.alias)
            .exclude(state__in=_TERMINAL)
            .exclude(parent_id__in=waiting)
            .values_list("parent_id", flat=True)
            .distinct()[:limit]
        )
        parent_ids |= set(  # children on other backends that have not reported yet
            FlowDependency.objects.using(self.db)
            .filter(kind="child", status="pending", job_id__in=settled.values("id"))
            .exclude(spec__backend=self.alias)
            .values_list("job_id", flat=True)
            .distinct()[:limit]
        )
        if not parent_ids:
            return []
        rows = self.jobs().filter(id__in=parent_ids)
        failed = set(
            FlowDependency.objects.using(self.db)
            .filter(job_id__in=parent_ids, kind="child", status="failed")
            .values_list("job_id", flat=True)
        )
        return [
            pid
            for pid, state, mode in rows.values_list("id", "state", "flow_mode")
            if state == State.CANCELLED or (fails_fast(mode) and pid in failed)
        ]
