"""Parent/child flows on the local backend: fan-out ack, child reports, settle, repair.

Reports travel through the outbox even when parent and child share this database, so one
delivery path (and one repair path) serves children on any backend.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Count, Exists, OuterRef

from ... import audit, outbox
from ...core.states import TERMINAL, State
from ...models import FlowDependency, OutboxEntry
from ...records import Ack, ChildSpec, Report
from . import sql
from .base import LedgerBase

if TYPE_CHECKING:
    from ...fanout import FlowState

logger = logging.getLogger("django_blamequeue.flows")
_TERMINAL = [s.value for s in TERMINAL]
FAN_OUT = audit.FLOW_FAN_OUT
REPORT = audit.FLOW_REPORT
CASCADE = audit.FLOW_CASCADE
REPORT_CHUNK = 500


class ChildOps(LedgerBase):
    # -- fan-out ---------------------------------------------------------------------------
    def apply_fan_out(self, ack: Ack, now: datetime) -> State | None:
        """Park the parent and store its manifest atomically; None if the token is stale.

        Each UPDATE is its own fence (id, token, inflight): nothing is read first and
        written later, so a lease taken over in between changes nothing here.
        """
        held = self.jobs().filter(id=ack.job_id, lease_token=ack.token, state=State.INFLIGHT)
        released = {"lease_token": None, "lease_expires_at": None, "updated_at": now}
        if held.filter(cancel_requested=True).update(
            state=State.CANCELLED, finished_at=now, reason="cancelled", **released
        ):
            self.report_terminal([ack.job_id])
            return State.CANCELLED
        if not held.update(state=State.WAITING_CHILDREN, flow_phase="collect", **released):
            return None
        queue, attempts = self.jobs().filter(id=ack.job_id).values_list("queue", "attempts")[0]
        children = ack.transition.children
        self._store_manifest(ack.job_id, children)
        audit.record(
            [
                audit.Event(
                    action=FAN_OUT,
                    job_id=ack.job_id,
                    queue=queue,
                    backend=self.alias,
                    attempt=attempts,
                    data={"children": len(children)},
                )
            ],
            using=self.db,
        )
        if not children:
            self.settle([ack.job_id], now)
        return State.WAITING_CHILDREN

    def _store_manifest(self, parent_id: str, children: Sequence[ChildSpec]) -> None:
        flow_id = children[0].job.flow_id if children else parent_id
        FlowDependency.objects.using(self.db).bulk_create(
            [
                FlowDependency(
                    flow_id=flow_id or parent_id,
                    kind=FlowDependency.KIND_CHILD,
                    job_id=parent_id,
                    depends_on_id=c.job.job_id,
                    key=c.key,
                    spec={"backend": c.backend, "job": outbox.job_to_body(c.job)},
                )
                for c in children
            ],
            ignore_conflicts=True,
        )
        self._land(children)

    def _land(self, children: Sequence[ChildSpec]) -> None:
        """Insert local children here; send the others through this database's outbox."""
        here = [c.job for c in children if c.backend == self.alias]
        if here:
            self.enqueue_many(here)
        outbox.write_many(
            [
                ("enqueue", c.backend, c.job.job_id, outbox.job_to_body(c.job))
                for c in children
                if c.backend != self.alias
            ],
            using=self.db,
        )

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
        outbox.write_many(
            [
                (
                    "report",
                    parent_backend or self.alias,
                    job_id,
                    outbox.report_to_body(
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
            ],
            using=self.db,
        )
        return len(rows)

    def deliver_reports(self, reports: Sequence[Report], now: datetime | None = None) -> int:
        """Record reports on the parents' rows (once: only a pending row changes); settle."""
        recorded = 0
        with transaction.atomic(using=self.db):
            t = self._now(now)
            parents = sorted({r.parent_id for r in reports})
            if self.is_postgres:  # serialise settles of one parent across relays
                list(
                    self.jobs()
                    .filter(id__in=parents)
                    .select_for_update()
                    .order_by("id")
                    .values_list("id", flat=True)
                )
            unique = {(r.parent_id, r.child_id): r for r in reversed(reports)}  # first one wins
            changed: set[str] = set()
            events: list[audit.Event] = []
            batch = list(unique.values())
            for start in range(0, len(batch), REPORT_CHUNK):
                chunk = batch[start : start + REPORT_CHUNK]
                params: list[Any] = [self._adapt(t)]
                for r in chunk:
                    params += [r.parent_id, r.child_id, r.state, r.result, r.result_type, r.error]
                with self.connection.cursor() as cur:
                    cur.execute(sql.record_reports(self.connection.vendor, len(chunk)), params)
                    rows = cur.fetchall()
                recorded += len(rows)
                for parent_id, child_id, state in rows:  # a duplicate changed nothing: no event
                    changed.add(parent_id)
                    data = {"parent_id": parent_id, "state": state}
                    events.append(
                        audit.Event(action=REPORT, job_id=child_id, backend=self.alias, data=data)
                    )
            audit.record(events, using=self.db)
            if changed:
                self.settle(sorted(changed), t)
        return recorded

    def settle(self, parent_ids: Sequence[str], now: datetime) -> list[str]:
        """Re-pend parents with no pending child, or with a failure under ``"fail"``."""
        deps = FlowDependency.objects.using(self.db).filter(job_id=OuterRef("id"), kind="child")
        # EXISTS stops at the first row: a wide flow is not counted on every report batch.
        due = [
            p
            for p, mode, pending, failed in self.jobs()
            .filter(id__in=list(parent_ids), state=State.WAITING_CHILDREN)
            .annotate(
                pending=Exists(deps.filter(status="pending")),
                failed=Exists(deps.filter(status="failed")),
            )
            .values_list("id", "flow_mode", "pending", "failed")
            if not pending or (mode != "continue" and failed)
        ]
        if not due:
            return []
        self.jobs().filter(id__in=due, state=State.WAITING_CHILDREN).update(
            state=State.PENDING, available_at=now, updated_at=now
        )
        tally: dict[str, dict[str, int]] = {p: {} for p in due}  # for the settle's audit event
        for job_id, status, n in (
            FlowDependency.objects.using(self.db)
            .filter(job_id__in=due, kind="child")
            .values_list("job_id", "status")
            .annotate(n=Count("id"))
            .order_by()
        ):
            tally[job_id][status] = n
        fail_fast = [p for p in due if tally[p].get("pending")]
        rows = dict(self.jobs().filter(id__in=due).values_list("id", "queue"))
        self._made_pending(list(rows.items()), now)
        settled = [
            audit.Event(
                action=audit.FLOW_SETTLE,
                job_id=p,
                queue=rows.get(p),
                backend=self.alias,
                data={"children": tally[p], "fail_fast": p in fail_fast},
            )
            for p in due
        ]
        audit.record(settled, using=self.db)
        if fail_fast:
            self.cascade_children(fail_fast, now)
        return due

    def cascade_children(self, parent_ids: Sequence[str], now: datetime) -> int:
        """Cancel the unfinished children (pending, blocked and in flight) of these parents.

        Children here are cancelled in this transaction; children on other backends once it
        commits (a crash in between is mended by the flow sweeper, which cascades again).
        """
        n = self.cascade_cancel(list(parent_ids), now)
        remote = self._remote_unreported(parent_ids)
        if remote:
            transaction.on_commit(lambda: _cancel_remote(remote), using=self.db)
        if n or remote:
            audit.record(
                [audit.Event(action=CASCADE, job_id=p, backend=self.alias) for p in parent_ids],
                using=self.db,
            )
        return n + len(remote)

    def _remote_unreported(self, parent_ids: Sequence[str]) -> list[tuple[str, str]]:
        """(backend, child id) of these parents' unreported children on other backends."""
        return list(
            FlowDependency.objects.using(self.db)
            .filter(job_id__in=list(parent_ids), kind="child", status="pending")
            .exclude(spec__backend=self.alias)
            .values_list("spec__backend", "depends_on_id")
        )

    def flow_state(self, parent_id: str) -> FlowState:
        from ...fanout import state_from_rows

        rows = list(
            FlowDependency.objects.using(self.db)
            .filter(job_id=parent_id, kind="child")
            .values("key", "status", "result", "result_type", "error")
        )
        return state_from_rows([dict(r) for r in rows])

    def children_tally(self, parent_id: str) -> dict[str, int]:
        return dict(
            FlowDependency.objects.using(self.db)
            .filter(job_id=parent_id, kind="child")
            .values_list("status")
            .annotate(n=Count("id"))
            .order_by()
        )

    def unsent_for(self, job_ids: Sequence[str], kind: str) -> set[str]:
        return set(
            OutboxEntry.objects.using(self.db)
            .filter(job_id__in=list(job_ids), kind=kind, sent_at__isnull=True)
            .values_list("job_id", flat=True)
        )

    # -- repair (the flow sweeper) -----------------------------------------------------------
    def repair_flows(self, now: datetime | None = None, limit: int = 500) -> dict[str, int]:
        """Mend what the push path missed; each parent in its own savepoint.

        Re-lands children that never landed, synthesizes reports for terminal children whose
        report was lost, settles parents with nothing pending, cascades cancels after a
        settle. Pages through every waiting parent, ``limit`` at a time. One broken row is
        logged and skipped; it never blocks the rest.
        """
        counts = {"relanded": 0, "synthesized": 0, "settled": 0, "cascaded": 0, "skipped": 0}
        t = self._now(now)
        cursor = ""
        while True:
            waiting = list(
                self.jobs()
                .filter(state=State.WAITING_CHILDREN, id__gt=cursor)
                .order_by("id")
                .values_list("id", flat=True)[:limit]
            )
            for parent_id in waiting:
                try:
                    with transaction.atomic(using=self.db):
                        self._repair_parent(parent_id, t, counts)
                except Exception as exc:
                    counts["skipped"] += 1
                    logger.warning("flow repair skipped parent %s: %s", parent_id, _describe(exc))
            if len(waiting) < limit:
                break
            cursor = waiting[-1]
        for parent_id in self._settled_with_live_children(limit):
            try:
                with transaction.atomic(using=self.db):
                    counts["cascaded"] += self.cascade_children([parent_id], t)
            except Exception as exc:
                counts["skipped"] += 1
                logger.warning("flow cascade skipped parent %s: %s", parent_id, _describe(exc))
        return counts

    def _repair_parent(self, parent_id: str, now: datetime, counts: dict[str, int]) -> None:
        from ...backends import get_backend

        qs = self.jobs().filter(id=parent_id, state=State.WAITING_CHILDREN)
        if self.is_postgres:
            qs = qs.select_for_update()
        if not qs.exists():  # re-check around the repair: it may have settled meanwhile
            return
        deps = FlowDependency.objects.using(self.db).filter(job_id=parent_id, kind="child")
        pending = list(deps.filter(status="pending").values_list("depends_on_id", "spec__backend"))
        if not pending:
            counts["settled"] += len(self.settle([parent_id], now))
            return
        by_backend: dict[str, list[str]] = {}
        for child_id, alias in pending:
            by_backend.setdefault(alias or self.alias, []).append(child_id)
        for alias, ids in by_backend.items():
            target = get_backend(alias)
            found = _states(target, ids)
            in_flight = self.unsent_for(ids, "enqueue")
            missing = [j for j in ids if j not in found and j not in in_flight]
            if missing:
                specs = deps.filter(depends_on_id__in=missing).values_list("key", "spec")
                self._land(
                    [
                        ChildSpec(
                            key=key, job=outbox.job_from_body((spec or {})["job"]), backend=alias
                        )
                        for key, spec in specs
                    ]
                )
                counts["relanded"] += len(missing)
            terminal = [j for j, st in found.items() if st in _TERMINAL]
            if terminal:
                lost = sorted(set(terminal) - target.unsent_for(terminal, "report"))
                if lost:
                    counts["synthesized"] += target.report_terminal(lost)

    def child_states(self, ids: Sequence[str]) -> dict[str, str]:
        """The state of each of these jobs that exists here, in one query."""
        return dict(self.jobs().filter(id__in=list(ids)).values_list("id", "state"))

    def _settled_with_live_children(self, limit: int) -> list[str]:
        """Parents here that settled fail-fast or were cancelled while children still run.

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
            if state == State.CANCELLED or (mode != "continue" and pid in failed)
        ]


def _states(target: Any, ids: Sequence[str]) -> dict[str, str]:
    lookup = getattr(target, "child_states", None)
    if lookup is not None:
        return lookup(ids)  # type: ignore[no-any-return]
    return {i.job_id: i.state for i in (target.get(j) for j in ids) if i is not None}


def _cancel_remote(children: Sequence[tuple[str, str]]) -> None:
    from ...backends import get_backend

    for alias, child_id in children:
        try:
            get_backend(alias).cancel(child_id)
        except Exception as exc:  # the flow sweeper cascades again
            logger.warning("cascade to child %s on %s failed: %s", child_id, alias, _describe(exc))


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


__all__ = ["ChildOps", "_describe", "logger"]
