"""Flows in the job table: child reports, settles, cascades, DAG releases and cancels.

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

Unless a method says otherwise, it runs inside the caller's transaction. The manifests a
fan-out stores are ``manifests.py``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Count

from django_blamequeue import audit
from django_blamequeue.backends.hooks import current_hooks
from django_blamequeue.backends.jobtable import flowsql
from django_blamequeue.backends.jobtable.rows import info_from_model
from django_blamequeue.backends.jobtable.table import JobTable, Released
from django_blamequeue.core import wire
from django_blamequeue.core.records import CancelResult, JobInfo, Report
from django_blamequeue.core.rules import fails_fast
from django_blamequeue.core.states import TERMINAL, WAITING, State
from django_blamequeue.models import FlowDependency, OutboxEntry

_TERMINAL = [s.value for s in TERMINAL]
_WAITING = [s.value for s in WAITING] + [State.WAITING_CHILDREN.value]
REPORT = audit.FLOW_REPORT
CASCADE = audit.FLOW_CASCADE
REPORT_CHUNK = 500


class Flows:
    """The flow bookkeeping of a job table, shared by the local backend and the SQS ledger."""

    def __init__(self, table: JobTable, released: Released) -> None:
        self.table = table
        self.released = released  # settled parents and released dependants

    # -- reports ---------------------------------------------------------------------------
    def report_terminal(self, ids: Sequence[str]) -> int:
        """Outbox a report for each terminal child among ``ids`` (same transaction)."""
        rows = list(
            self.table.jobs()
            .filter(id__in=list(ids), parent_id__isnull=False, state__in=_TERMINAL)
            .values_list(
                "id", "parent_id", "parent_backend", "state", "result", "content_type", "error"
            )
        )
        self.table.outbox(
            [
                (
                    "report",
                    parent_backend or self.table.alias,
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

    def record_children(self, child_ids: Sequence[str], now: datetime | None) -> set[str]:
        """Record the reports of these terminal children, whose parents are on this backend,
        straight from their rows, in the caller's transaction; the relay settles the parents
        once it commits. Only manifest rows still pending change; answers the children
        recorded."""
        recorded: list[tuple[str, str, str]] = []
        for start in range(0, len(child_ids), REPORT_CHUNK):
            chunk = list(child_ids[start : start + REPORT_CHUNK])
            with self.table.connection.cursor() as cur:
                if self.table.is_postgres:
                    statement = flowsql.record_children_postgresql(self.table.name)
                    cur.execute(statement, [chunk, now])  # None: the statement's clock
                else:
                    statement = flowsql.record_children_sqlite(len(chunk), self.table.name)
                    cur.execute(statement, [self.table.adapt(self.table.clock(now)), *chunk])
                recorded += cur.fetchall()
        self._audit_reports(recorded)
        parents = sorted({parent_id for parent_id, _, _ in recorded})
        if parents:
            hooks = current_hooks()
            transaction.on_commit(
                lambda: hooks.settle_soon(self.table.alias, parents), using=self.table.db
            )
        return {child_id for _, child_id, _ in recorded}

    def deliver_reports(self, reports: Sequence[Report], now: datetime | None = None) -> int:
        """Record reports on the parents' rows (once: only a pending row changes); settle."""
        recorded: list[tuple[str, str, str]] = []
        with transaction.atomic(using=self.table.db):
            t = self.table.clock(now)
            self.lock_parents([r.parent_id for r in reports])
            unique = {(r.parent_id, r.child_id): r for r in reversed(reports)}  # first one wins
            batch = list(unique.values())
            for start in range(0, len(batch), REPORT_CHUNK):
                chunk = batch[start : start + REPORT_CHUNK]
                params: list[Any] = [self.table.adapt(t)]
                for r in chunk:
                    params += [r.parent_id, r.child_id, r.state, r.result, r.result_type, r.error]
                with self.table.connection.cursor() as cur:
                    cur.execute(
                        flowsql.record_reports(self.table.connection.vendor, len(chunk)), params
                    )
                    recorded += cur.fetchall()
            self._audit_reports(recorded)
            if recorded:  # the parents are locked: settle here
                self.settle(sorted({parent_id for parent_id, _, _ in recorded}), t)
        return len(recorded)

    def _audit_reports(self, rows: Sequence[tuple[str, str, str]]) -> None:
        """Audit the reports just recorded: (parent, child, state); a duplicate changed
        nothing and is not among them."""
        audit.record(
            [
                audit.Event(
                    action=REPORT,
                    job_id=child_id,
                    backend=self.table.alias,
                    data={"parent_id": parent_id, "state": state},
                )
                for parent_id, child_id, state in rows
            ],
            using=self.table.db,
        )

    # -- settles ---------------------------------------------------------------------------
    def lock_parents(self, parent_ids: Sequence[str]) -> None:
        """Lock these parents' rows, ancestors first (see the module's lock order), so one
        parent settles in one transaction at a time and a relay recording reports cannot miss
        another's (READ COMMITTED: the second one waits, then reads the first one's commit).
        SQLite serialises writers."""
        if not parent_ids or not self.table.is_postgres:
            return
        list(
            self.table.jobs()
            .filter(id__in=sorted(set(parent_ids)))
            .select_for_update()
            .order_by("flow_depth", "id")
            .values_list("id", flat=True)
        )

    def settle_reported(self, parent_ids: Sequence[str], now: datetime | None = None) -> list[str]:
        """Settle those of these parents that are due, in a transaction of its own: the
        relay's step after an ack that recorded reports. A read finds the due ones; they are
        locked and checked again before anything changes."""
        with transaction.atomic(using=self.table.db):
            if not self.table.is_postgres or now is not None:  # SQLite: one writer at a time
                self.lock_parents(parent_ids)
                return self.settle(parent_ids, self.table.clock(now))
            found: list[tuple[str, str, datetime]] = []
            ids = sorted(set(parent_ids))
            for start in range(0, len(ids), REPORT_CHUNK):
                chunk = ids[start : start + REPORT_CHUNK]
                with self.table.connection.cursor() as cur:  # due, locked in order, re-pended
                    cur.execute(flowsql.settle_due_postgresql(self.table.name), [chunk])
                    found += cur.fetchall()
            if not found:
                return []
            return self._settled([(job_id, queue) for job_id, queue, _ in found], found[0][2])

    def settle(self, parent_ids: Sequence[str], now: datetime) -> list[str]:
        """Re-pend parents with no pending child, or with a failure under ``"fail"``; the
        caller holds their locks (``lock_parents``)."""
        due = self._due(parent_ids)
        return self._settle_due(due, now) if due else []

    def _due(self, parent_ids: Sequence[str]) -> list[str]:
        """The waiting parents among these with no pending child, or with a failure under
        ``"fail"``. EXISTS stops at the first row: a wide flow is not counted each time.
        Once due, a parent stays due until it settles (a report never becomes pending)."""
        due: list[str] = []
        ids = sorted(set(parent_ids))
        for start in range(0, len(ids), REPORT_CHUNK):
            chunk = ids[start : start + REPORT_CHUNK]
            with self.table.connection.cursor() as cur:
                cur.execute(flowsql.due_parents(len(chunk), self.table.name), chunk)
                due += [row[0] for row in cur.fetchall()]
        return due

    def _settle_due(self, due: Sequence[str], now: datetime) -> list[str]:
        """Re-pend these due parents (locked by the caller) that still wait."""
        rows: list[tuple[str, str]] = []
        stamp = self.table.adapt(now)
        for start in range(0, len(due), REPORT_CHUNK):
            chunk = list(due[start : start + REPORT_CHUNK])
            with self.table.connection.cursor() as cur:
                cur.execute(
                    flowsql.settle_parents(len(chunk), self.table.name), [stamp, stamp, *chunk]
                )
                rows += [(r[0], r[1]) for r in cur.fetchall()]
        return self._settled(rows, now) if rows else []

    def _settled(self, rows: Sequence[tuple[str, str]], now: datetime) -> list[str]:
        """After re-pending these (parent, queue): wake their workers, audit the settles with
        the children's tally, cascade the fail-fast ones."""
        settled = [job_id for job_id, _ in rows]
        tally: dict[str, dict[str, int]] = {p: {} for p in settled}  # for the audit event
        for start in range(0, len(settled), REPORT_CHUNK):
            chunk = settled[start : start + REPORT_CHUNK]
            with self.table.connection.cursor() as cur:
                cur.execute(flowsql.tally_children(len(chunk)), chunk)
                for job_id, status, n in cur.fetchall():
                    tally[job_id][status] = n
        fail_fast = [p for p in settled if tally[p].get("pending")]
        self.released(list(rows), now)
        audit.record(
            [
                audit.Event(
                    action=audit.FLOW_SETTLE,
                    job_id=p,
                    queue=queue,
                    backend=self.table.alias,
                    data={"children": tally[p], "fail_fast": p in fail_fast},
                )
                for p, queue in rows
            ],
            using=self.table.db,
        )
        if fail_fast:
            self.cascade_children(fail_fast, now)
        return settled

    # -- cascades --------------------------------------------------------------------------
    def cascade_children(self, parent_ids: Sequence[str], now: datetime) -> int:
        """Cancel the unfinished children (pending, blocked and in flight) of these parents.

        Children here are cancelled in this transaction; children on other backends once it
        commits (a crash in between is mended by the flow sweeper, which cascades again).
        """
        n, remote = self._cascade_here(parent_ids, now)
        if remote:
            hooks = current_hooks()
            transaction.on_commit(lambda: hooks.cancel_elsewhere(remote), using=self.table.db)
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
                [
                    audit.Event(action=CASCADE, job_id=p, backend=self.table.alias)
                    for p in parent_ids
                ],
                using=self.table.db,
            )
        return n, remote

    def _remote_unreported(self, parent_ids: Sequence[str]) -> list[tuple[str, str]]:
        """(backend, child id) of these parents' unreported children on other backends."""
        return list(
            FlowDependency.objects.using(self.table.db)
            .filter(job_id__in=list(parent_ids), kind="child", status="pending")
            .exclude(spec__backend=self.table.alias)
            .values_list("spec__backend", "depends_on_id")
        )

    def cascade_cancel(self, ids: Sequence[str], now: datetime) -> int:
        """Cancel what can no longer run: blocked DAG dependants and children, transitively.

        Waiting jobs are cancelled at once; running ones get a cancel request.
        """
        frontier = list(ids)
        seen = set(frontier)
        total = 0
        deps = FlowDependency.objects.using(self.table.db)
        while frontier:
            dependants = set(
                deps.filter(depends_on_id__in=frontier, kind="dag").values_list("job_id", flat=True)
            )
            children = set(
                self.table.jobs().filter(parent_id__in=frontier).values_list("id", flat=True)
            )
            nxt = [j for j in dependants | children if j not in seen]
            if not nxt:
                break
            seen.update(nxt)
            total += self._cancel_ids(nxt, now)
            frontier = nxt
        return total

    def _cancel_ids(self, ids: Sequence[str], now: datetime) -> int:
        rows = list(
            self.table.jobs()
            .filter(id__in=ids)
            .exclude(state__in=_TERMINAL)
            .values_list("id", "state", "queue")
        )
        waiting = [r for r in rows if r[1] in _WAITING]
        if waiting:
            self.table.jobs().filter(id__in=[r[0] for r in waiting], state__in=_WAITING).update(
                state=State.CANCELLED, finished_at=now, updated_at=now, reason="cancelled"
            )
            self.report_terminal([r[0] for r in waiting])
        # Every row, not only those read as running: a worker may have claimed a waiting one
        # between our read and our update (the update then waited for its commit), and that
        # run must be interrupted too.
        self.table.jobs().filter(id__in=[r[0] for r in rows], state=State.INFLIGHT).update(
            cancel_requested=True, updated_at=now
        )
        audit.record(
            [
                audit.Event(
                    action=audit.CANCEL if r[1] != State.INFLIGHT else audit.CANCEL_REQUESTED,
                    job_id=r[0],
                    queue=r[2],
                    backend=self.table.alias,
                    data={"cascade": True},
                )
                for r in rows
            ],
            using=self.table.db,
        )
        return len(rows)

    def cascade_due(self, limit: int) -> list[str]:
        return self._settled_with_live_children(limit)

    def cascade(
        self, parent_id: str, now: datetime | None = None
    ) -> tuple[int, list[tuple[str, str]]]:
        with transaction.atomic(using=self.table.db):
            n, remote = self._cascade_here([parent_id], self.table.clock(now))
        return n, remote

    def _settled_with_live_children(self, limit: int) -> list[str]:
        """Parents here that settled fail-fast or were cancelled while children still run
        (rule: cascade).

        Parents still waiting are left out in SQL, so a crowd of healthy flows never hides
        the few that need a cascade.
        """
        waiting = self.table.jobs().filter(state=State.WAITING_CHILDREN).values("id")
        # This backend's settled parents only: another backend's rows may share the table of
        # flow rows (the SQS ledger in the local backend's database).
        settled = (
            self.table.jobs().filter(flow_phase__isnull=False).exclude(state=State.WAITING_CHILDREN)
        )
        parent_ids = set(
            self.table.jobs()
            .filter(parent_id__isnull=False, parent_backend=self.table.alias)
            .exclude(state__in=_TERMINAL)
            .exclude(parent_id__in=waiting)
            .values_list("parent_id", flat=True)
            .distinct()[:limit]
        )
        parent_ids |= set(  # children on other backends that have not reported yet
            FlowDependency.objects.using(self.table.db)
            .filter(kind="child", status="pending", job_id__in=settled.values("id"))
            .exclude(spec__backend=self.table.alias)
            .values_list("job_id", flat=True)
            .distinct()[:limit]
        )
        if not parent_ids:
            return []
        rows = self.table.jobs().filter(id__in=parent_ids)
        failed = set(
            FlowDependency.objects.using(self.table.db)
            .filter(job_id__in=parent_ids, kind="child", status="failed")
            .values_list("job_id", flat=True)
        )
        return [
            pid
            for pid, state, mode in rows.values_list("id", "state", "flow_mode")
            if state == State.CANCELLED or (fails_fast(mode) and pid in failed)
        ]

    # -- DAG releases ----------------------------------------------------------------------
    def release_dependants(self, done_ids: Sequence[str], now: datetime) -> list[str]:
        """Blocked DAG jobs whose dependencies are now all done become pending."""
        released: list[tuple[str, str]] = []
        for start in range(0, len(done_ids), 500):
            chunk = list(done_ids[start : start + 500])
            with self.table.connection.cursor() as cur:
                if self.table.is_postgres:
                    # Two dependencies finishing at once must not both miss the release.
                    cur.execute(flowsql.lock_dependants(len(chunk), self.table.name), chunk)
                a = self.table.adapt(now)
                cur.execute(
                    flowsql.release_dependants(
                        self.table.connection.vendor, len(chunk), self.table.name
                    ),
                    [a, a, *chunk],
                )
                released += [(job_id, queue) for job_id, queue in cur.fetchall()]
        self.released(released, now)
        return [job_id for job_id, _ in released]

    # -- operations ------------------------------------------------------------------------
    def cancel(self, job_id: str, now: datetime | None = None) -> CancelResult:
        with transaction.atomic(using=self.table.db):
            t = self.table.clock(now)
            qs = self.table.jobs().filter(id=job_id)
            if self.table.is_postgres:
                qs = qs.select_for_update()
            row = qs.values_list("state", "queue", "cancel_requested").first()
            if row is None:
                return CancelResult(found=False)
            state, queue, already = State(row[0]), row[1], row[2]
            ev = {"job_id": job_id, "queue": queue, "backend": self.table.alias}
            if state in TERMINAL:
                return CancelResult(found=True, state=state)
            if state == State.INFLIGHT:
                if not already:
                    qs.update(cancel_requested=True, updated_at=t)
                    audit.record(
                        [audit.Event(action=audit.CANCEL_REQUESTED, **ev)], using=self.table.db
                    )
                return CancelResult(found=True, requested=True, state=state)
            qs.filter(state=state).update(
                state=State.CANCELLED, finished_at=t, updated_at=t, reason="cancelled"
            )
            audit.record([audit.Event(action=audit.CANCEL, **ev)], using=self.table.db)
            self.report_terminal([job_id])
            self.cascade_children([job_id], t)
            return CancelResult(found=True, cancelled=True, state=State.CANCELLED)

    def cancel_flow(self, flow_id: str, now: datetime | None = None) -> int:
        with transaction.atomic(using=self.table.db):
            t = self.table.clock(now)
            ids = list(
                self.table.jobs()
                .filter(flow_id=flow_id)
                .exclude(state__in=_TERMINAL)
                .values_list("id", flat=True)
            )
            n = self._cancel_ids(ids, t) if ids else 0
            audit.record(
                [
                    audit.Event(
                        action=audit.FLOW_CANCEL,
                        backend=self.table.alias,
                        data={"flow_id": flow_id, "count": n},
                    )
                ],
                using=self.table.db,
            )
        return n

    def flow_jobs(self, flow_id: str) -> list[JobInfo]:
        edges: dict[str, list[str]] = {}
        for job_id, dep in (
            FlowDependency.objects.using(self.table.db)
            .filter(flow_id=flow_id, kind="dag")
            .values_list("job_id", "depends_on_id")
        ):
            edges.setdefault(job_id, []).append(dep)
        tallies: dict[str, dict[str, int]] = {}
        for job_id, status, n in (
            FlowDependency.objects.using(self.table.db)
            .filter(flow_id=flow_id, kind="child")
            .values_list("job_id", "status")
            .annotate(n=Count("id"))
            .order_by()
        ):
            tallies.setdefault(job_id, {})[status] = n
        jobs: Any = self.table.jobs().filter(flow_id=flow_id).order_by("id")
        return [
            info_from_model(
                j,
                self.table.alias,
                edges.get(j.id, ()),
                tallies.get(j.id, {}) if j.flow_phase else None,
            )
            for j in jobs
        ]

    def unsent_for(self, job_ids: Sequence[str], kind: str) -> set[str]:
        return set(
            OutboxEntry.objects.using(self.table.db)
            .filter(job_id__in=list(job_ids), kind=kind, sent_at__isnull=True)
            .values_list("job_id", flat=True)
        )
