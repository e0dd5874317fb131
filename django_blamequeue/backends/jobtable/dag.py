"""DAG flows in the job table: release of blocked dependants, cascading cancel, flow listings.

Mixed into ``DatabaseBackend`` and ``SqsBackend``; every method runs inside the caller's
transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Count

from django_blamequeue import audit
from django_blamequeue.backends.jobtable import flowsql
from django_blamequeue.backends.jobtable.base import LedgerBase
from django_blamequeue.backends.jobtable.rows import info_from_model
from django_blamequeue.core.records import CancelResult, JobInfo
from django_blamequeue.core.states import TERMINAL, WAITING, State
from django_blamequeue.models import FlowDependency

_WAITING = [s.value for s in WAITING] + [State.WAITING_CHILDREN.value]
_TERMINAL = [s.value for s in TERMINAL]


class DagRelease(LedgerBase):
    def release_dependants(self, done_ids: Sequence[str], now: datetime) -> list[str]:
        """Blocked DAG jobs whose dependencies are now all done become pending."""
        released: list[tuple[str, str]] = []
        for start in range(0, len(done_ids), 500):
            chunk = list(done_ids[start : start + 500])
            with self.connection.cursor() as cur:
                if self.is_postgres:
                    # Two dependencies finishing at once must not both miss the release.
                    cur.execute(flowsql.lock_dependants(len(chunk), self.table), chunk)
                a = self._adapt(now)
                cur.execute(
                    flowsql.release_dependants(self.connection.vendor, len(chunk), self.table),
                    [a, a, *chunk],
                )
                released += [(job_id, queue) for job_id, queue in cur.fetchall()]
        self._made_pending(released, now)
        return [job_id for job_id, _ in released]

    def cascade_cancel(self, ids: Sequence[str], now: datetime) -> int:
        """Cancel what can no longer run: blocked DAG dependants and children, transitively.

        Waiting jobs are cancelled at once; running ones get a cancel request.
        """
        frontier = list(ids)
        seen = set(frontier)
        total = 0
        deps = FlowDependency.objects.using(self.db)
        while frontier:
            dependants = set(
                deps.filter(depends_on_id__in=frontier, kind="dag").values_list("job_id", flat=True)
            )
            children = set(self.jobs().filter(parent_id__in=frontier).values_list("id", flat=True))
            nxt = [j for j in dependants | children if j not in seen]
            if not nxt:
                break
            seen.update(nxt)
            total += self._cancel_ids(nxt, now)
            frontier = nxt
        return total

    def _cancel_ids(self, ids: Sequence[str], now: datetime) -> int:
        rows = list(
            self.jobs()
            .filter(id__in=ids)
            .exclude(state__in=_TERMINAL)
            .values_list("id", "state", "queue")
        )
        waiting = [r for r in rows if r[1] in _WAITING]
        if waiting:
            self.jobs().filter(id__in=[r[0] for r in waiting], state__in=_WAITING).update(
                state=State.CANCELLED, finished_at=now, updated_at=now, reason="cancelled"
            )
            self.report_terminal([r[0] for r in waiting])
        # Every row, not only those read as running: a worker may have claimed a waiting one
        # between our read and our update (the update then waited for its commit), and that
        # run must be interrupted too.
        self.jobs().filter(id__in=[r[0] for r in rows], state=State.INFLIGHT).update(
            cancel_requested=True, updated_at=now
        )
        audit.record(
            [
                audit.Event(
                    action=audit.CANCEL if r[1] != State.INFLIGHT else audit.CANCEL_REQUESTED,
                    job_id=r[0],
                    queue=r[2],
                    backend=self.alias,
                    data={"cascade": True},
                )
                for r in rows
            ],
            using=self.db,
        )
        return len(rows)

    def cancel(self, job_id: str, now: datetime | None = None) -> CancelResult:
        with transaction.atomic(using=self.db):
            t = self._now(now)
            qs = self.jobs().filter(id=job_id)
            if self.is_postgres:
                qs = qs.select_for_update()
            row = qs.values_list("state", "queue", "cancel_requested").first()
            if row is None:
                return CancelResult(found=False)
            state, queue, already = State(row[0]), row[1], row[2]
            ev = {"job_id": job_id, "queue": queue, "backend": self.alias}
            if state in TERMINAL:
                return CancelResult(found=True, state=state)
            if state == State.INFLIGHT:
                if not already:
                    qs.update(cancel_requested=True, updated_at=t)
                    audit.record([audit.Event(action=audit.CANCEL_REQUESTED, **ev)], using=self.db)
                return CancelResult(found=True, requested=True, state=state)
            qs.filter(state=state).update(
                state=State.CANCELLED, finished_at=t, updated_at=t, reason="cancelled"
            )
            audit.record([audit.Event(action=audit.CANCEL, **ev)], using=self.db)
            self.report_terminal([job_id])
            self.cascade_children([job_id], t)
            return CancelResult(found=True, cancelled=True, state=State.CANCELLED)

    def cancel_flow(self, flow_id: str, now: datetime | None = None) -> int:
        with transaction.atomic(using=self.db):
            t = self._now(now)
            ids = list(
                self.jobs()
                .filter(flow_id=flow_id)
                .exclude(state__in=_TERMINAL)
                .values_list("id", flat=True)
            )
            n = self._cancel_ids(ids, t) if ids else 0
            audit.record(
                [
                    audit.Event(
                        action=audit.FLOW_CANCEL,
                        backend=self.alias,
                        data={"flow_id": flow_id, "count": n},
                    )
                ],
                using=self.db,
            )
        return n

    def flow_jobs(self, flow_id: str) -> list[JobInfo]:
        edges: dict[str, list[str]] = {}
        for job_id, dep in (
            FlowDependency.objects.using(self.db)
            .filter(flow_id=flow_id, kind="dag")
            .values_list("job_id", "depends_on_id")
        ):
            edges.setdefault(job_id, []).append(dep)
        tallies: dict[str, dict[str, int]] = {}
        for job_id, status, n in (
            FlowDependency.objects.using(self.db)
            .filter(flow_id=flow_id, kind="child")
            .values_list("job_id", "status")
            .annotate(n=Count("id"))
            .order_by()
        ):
            tallies.setdefault(job_id, {})[status] = n
        jobs: Any = self.jobs().filter(flow_id=flow_id).order_by("id")
        return [
            info_from_model(
                j, self.alias, edges.get(j.id, ()), tallies.get(j.id, {}) if j.flow_phase else None
            )
            for j in jobs
        ]
