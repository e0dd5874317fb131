"""Parent/child flows in the job table: the fan-out ack stores a parent's manifest and lands its
children; reads of the manifest (what ``collect`` sees, what the flow sweeper mends).

The manifest is one ``FlowDependency`` row per child (kind ``child``), holding the child's full
spec, so a child that never landed can be landed from its row (``reland``). Reports and
settles: ``flows.py``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Count

from django_blamequeue import audit
from django_blamequeue.backends.base import Backend
from django_blamequeue.backends.flowstate import state_from_rows
from django_blamequeue.backends.jobtable import flowsql, sql
from django_blamequeue.backends.jobtable.flows import Flows
from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.core import wire
from django_blamequeue.core.records import Ack, ChildSpec, FlowState
from django_blamequeue.core.states import State
from django_blamequeue.models import FlowDependency

FAN_OUT = audit.FLOW_FAN_OUT


class Manifests:
    """The manifests of fanned-out parents: stored by the fan-out ack, read by ``collect``
    and by the flow sweeper."""

    def __init__(self, table: JobTable, flows: Flows, engine: Backend) -> None:
        self.table = table
        self.flows = flows
        #: The backend holding the table: children land through its own ``enqueue_many``
        #: (the local insert; the SQS ledger row and its message).
        self.engine = engine

    # -- fan-out ---------------------------------------------------------------------------
    def apply_fan_outs(self, acks: Sequence[Ack], now: datetime) -> dict[str, State | None]:
        """Park each parent and store its manifest, in the caller's transaction; answers
        each parent's new state, None where the token was stale.

        One fenced UPDATE (id, token, inflight) parks them all — or cancels the ones whose
        cancel was requested meanwhile — and says which held their lease: nothing is read
        first and written later. Then one INSERT stores every manifest row (the child's full
        spec with it) and one enqueue lands every child.
        """
        answer: dict[str, State | None] = {a.job_id: None for a in acks}
        stamp = self.table.adapt(now)
        with self.table.connection.cursor() as cur:
            params: list[Any] = [stamp, stamp]
            for a in acks:
                params += [a.job_id, a.token]
            cur.execute(
                flowsql.park_parents(self.table.connection.vendor, len(acks), self.table.name),
                params,
            )
            parked = {r[0]: (State(r[1]), r[2], r[3]) for r in cur.fetchall()}
        for job_id, (state, _, _) in parked.items():
            answer[job_id] = state
        if cancelled := [j for j, (state, _, _) in parked.items() if state == State.CANCELLED]:
            self.flows.report_terminal(cancelled)
        fanned = [a for a in acks if answer[a.job_id] == State.WAITING_CHILDREN]
        if not fanned:
            return answer
        self._store_manifests([(a.job_id, a.transition.children) for a in fanned], now)
        audit.record(
            [
                audit.Event(
                    action=FAN_OUT,
                    job_id=a.job_id,
                    queue=parked[a.job_id][1],
                    backend=self.table.alias,
                    attempt=parked[a.job_id][2],
                    data={"children": len(a.transition.children)},
                )
                for a in fanned
            ],
            using=self.table.db,
        )
        if childless := [a.job_id for a in fanned if not a.transition.children]:
            self.flows.settle(childless, now)
        return answer

    def _store_manifests(
        self, manifests: Sequence[tuple[str, Sequence[ChildSpec]]], now: datetime
    ) -> None:
        """One manifest row per child (its full spec: a repair re-lands it from the row),
        a repeated one ignored; then the children land."""
        rows = [
            (
                c.job.flow_id or parent_id,
                FlowDependency.KIND_CHILD,
                parent_id,
                c.job.job_id,
                c.key,
                json.dumps({"backend": c.backend, "job": wire.job_to_body(c.job)}),
                "pending",
                now,
            )
            for parent_id, children in manifests
            for c in children
        ]
        if rows:
            with self.table.connection.cursor() as cur:
                if self.table.is_postgres:
                    varying, arrays = sql.unnest_params(list(zip(*rows, strict=True)))
                    cur.execute(flowsql.insert_manifest_postgresql(varying), arrays)
                else:
                    stamp = self.table.adapt(now)
                    per = self.table.connection.features.max_query_params // len(rows[0])
                    for start in range(0, len(rows), per):
                        chunk = rows[start : start + per]
                        params = [v for row in chunk for v in (*row[:-1], stamp)]
                        cur.execute(flowsql.insert_manifest_sqlite(len(chunk)), params)
        self.land([c for _, children in manifests for c in children])

    def land(self, children: Sequence[ChildSpec]) -> None:
        """Insert local children here; send the others through this database's outbox."""
        here = [c.job for c in children if c.backend == self.table.alias]
        if here:
            self.engine.enqueue_many(here)
        self.table.outbox(
            ("enqueue", c.backend, c.job.job_id, wire.job_to_body(c.job))
            for c in children
            if c.backend != self.table.alias
        )

    def reland(self, parent_id: str, child_ids: Sequence[str], now: datetime | None = None) -> int:
        with transaction.atomic(using=self.table.db):
            qs = self.table.jobs().filter(id=parent_id, state=State.WAITING_CHILDREN)
            if self.table.is_postgres:
                qs = qs.select_for_update()
            if not qs.exists():  # settled meanwhile: its children are not wanted now
                return 0
            specs = FlowDependency.objects.using(self.table.db).filter(
                job_id=parent_id, kind="child", status="pending", depends_on_id__in=child_ids
            )
            children = [
                ChildSpec(
                    key=key,
                    job=wire.job_from_body((spec or {})["job"]),
                    backend=(spec or {}).get("backend") or self.table.alias,
                )
                for key, spec in specs.values_list("key", "spec")
            ]
            self.land(children)
        return len(children)

    # -- the flow sweeper's verbs (the algorithm: sweeper/flow_repair.py) ---------------
    def waiting_parents(self, after: str, limit: int) -> list[str]:
        return list(
            self.table.jobs()
            .filter(state=State.WAITING_CHILDREN, id__gt=after)
            .order_by("id")
            .values_list("id", flat=True)[:limit]
        )

    def pending_children(self, parent_id: str) -> list[tuple[str, str]]:
        rows = FlowDependency.objects.using(self.table.db).filter(
            job_id=parent_id, kind="child", status="pending"
        )
        return [
            (child_id, alias or self.table.alias)
            for child_id, alias in rows.values_list("depends_on_id", "spec__backend")
        ]

    def flow_state(self, parent_id: str) -> FlowState:
        return self.flow_states([parent_id])[parent_id]

    def flow_states(self, parent_ids: Sequence[str]) -> dict[str, FlowState]:
        rows: dict[str, list[dict[str, Any]]] = {p: [] for p in parent_ids}
        for row in (
            FlowDependency.objects.using(self.table.db)
            .filter(job_id__in=list(parent_ids), kind="child")
            .values(
                "job_id",
                "key",
                "status",
                "result",
                "result_type",
                "error",
                "depends_on_id",
                "spec__backend",
            )
        ):
            data: dict[str, Any] = dict(row)
            parent = data.pop("job_id")
            data["job_id"] = data.pop("depends_on_id")
            data["backend"] = data.pop("spec__backend") or self.table.alias
            rows[parent].append(data)
        return {p: state_from_rows(r) for p, r in rows.items()}

    def children_tally(self, parent_id: str) -> dict[str, int]:
        return dict(
            FlowDependency.objects.using(self.table.db)
            .filter(job_id=parent_id, kind="child")
            .values_list("status")
            .annotate(n=Count("id"))
            .order_by()
        )

    def child_states(self, ids: Sequence[str]) -> dict[str, str]:
        """The state of each of these jobs that exists here, in one query."""
        return dict(self.table.jobs().filter(id__in=list(ids)).values_list("id", "state"))
