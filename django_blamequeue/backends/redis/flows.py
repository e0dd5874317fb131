"""Parent/child flows on the redis backend: its manifests, its outbox, the sweeper's verbs.

A child's terminal transition reports in the same script: onto its parent's manifest (and
the parent settles there and then) when the parent is on this backend, else into this
Redis's outbox, bound for the parent's backend. The relay takes those entries (and the
enqueues of children that live elsewhere) with ``take_outbox`` and delivers them, at least
once; targets record them once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django_blamequeue.backends.flow_verbs import state_from_rows
from django_blamequeue.backends.redis.base import RedisBase
from django_blamequeue.backends.redis.codec import Blobs, child_spec, report_spec, text
from django_blamequeue.core import wire
from django_blamequeue.core.records import ChildSpec, FlowState, OutboxItem, Report
from django_blamequeue.core.states import TERMINAL

logger = logging.getLogger("django_blamequeue.flows")
_TERMINAL = frozenset(s.value for s in TERMINAL)
OUTBOX_LEASE_S = 30.0  # a relay that dies mid-send leaves its entries for this long


class Flows(RedisBase):
    def _manifest(self, parent_id: str) -> dict[str, dict[str, Any]]:
        """child id → {"s": status, "k": key, "b": backend, "j": spec, "r", "t", "e"}."""
        children: dict[str, dict[str, Any]] = {}
        for field, value in self.client.hgetall(self.keys.manifest(parent_id)).items():
            kind, _, child = field.decode().partition(":")
            children.setdefault(child, {})[kind] = value
        return children

    def flow_state(self, parent_id: str) -> FlowState:
        rows = [
            {
                "key": text(c.get("k")),
                "status": text(c.get("s")),
                "result": c.get("r"),
                "result_type": text(c.get("t")),
                "error": text(c.get("e")),
            }
            for c in self._manifest(parent_id).values()
        ]
        return state_from_rows(rows)

    def deliver_reports(self, reports: Sequence[Report], now: datetime | None = None) -> int:
        unique = {(r.parent_id, r.child_id): r for r in reversed(reports)}  # first one wins
        if not unique:
            return 0
        blobs = Blobs()
        spec = [report_spec(r, blobs) for r in unique.values()]
        return int(self._run("deliver_reports", spec, blobs, now).result)

    def report_terminal(self, ids: Sequence[str]) -> int:
        return int(self._run("report_terminal", list(ids)).result) if ids else 0

    def unsent_for(self, job_ids: Sequence[str], kind: str) -> set[str]:
        if not job_ids:
            return set()
        counts = self.client.hmget(self.keys.unsent(kind), list(job_ids))
        return {j for j, n in zip(job_ids, counts, strict=True) if n and int(n) > 0}

    def child_states(self, ids: Sequence[str]) -> dict[str, str]:
        """The state of each of these jobs that exists here, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hget(self.keys.job(job_id), "state")
        return {j: s.decode() for j, s in zip(ids, pipe.execute(), strict=True) if s}

    def settle_reported(self, parent_ids: Sequence[str], now: datetime | None = None) -> list[str]:
        return list(self._run("settle", list(parent_ids), now=now).result) if parent_ids else []

    # -- the outbox, taken by the relay ------------------------------------------------------
    def take_outbox(self, limit: int, after: str = "") -> list[OutboxItem]:
        lease = round(OUTBOX_LEASE_S * 1_000_000)
        taken = self._run("outbox_take", [limit, lease, int(after or 0)]).result
        return [_item(raw) for raw in taken]

    def outbox_done(self, items: Sequence[OutboxItem], error: str | None = None) -> None:
        spec = ["done" if error is None else "failed", [[i.ref, error or ""] for i in items]]
        self._run("outbox_done", spec)

    # -- the flow sweeper's verbs (the algorithm: sweeper/flow_repair.py) ---------------
    def waiting_parents(self, after: str, limit: int) -> list[str]:
        start = b"(" + after.encode() if after else b"-"
        return [
            raw.decode()
            for raw in self.client.zrangebylex(self.keys.waiting, start, b"+", 0, limit)
        ]

    def pending_children(self, parent_id: str) -> list[tuple[str, str]]:
        return [
            (child_id, text(m.get("b")) or self.alias)
            for child_id, m in self._manifest(parent_id).items()
            if m.get("s") == b"pending"
        ]

    def reland(self, parent_id: str, child_ids: Sequence[str], now: datetime | None = None) -> int:
        manifest = self._manifest(parent_id)
        blobs = Blobs()
        children = []
        for child_id in child_ids:
            m = manifest.get(child_id)
            if m is None or m.get("s") != b"pending":
                continue
            job = wire.job_from_body(json.loads(m["j"]))
            spec = ChildSpec(
                key=text(m.get("k")) or "", job=job, backend=text(m.get("b")) or self.alias
            )
            children.append(child_spec(spec, blobs))
        if not children:
            return 0
        return int(self._run("reland", [parent_id, children], blobs, now).result)

    def cascade_due(self, limit: int) -> list[str]:
        return sorted(raw.decode() for raw in self.client.smembers(self.keys.cascade))[:limit]

    def cascade(
        self, parent_id: str, now: datetime | None = None
    ) -> tuple[int, list[tuple[str, str]]]:
        """Children here were cancelled by the script that settled or cancelled the parent;
        answers its unreported children on other backends (none while it still waits)."""
        state = self.client.hget(self.keys.job(parent_id), "state")
        if state == b"waiting_children" or state is None:
            return 0, []
        return 0, [
            (alias, child_id)
            for child_id, m in self._manifest(parent_id).items()
            if (alias := text(m.get("b")) or self.alias) != self.alias and m.get("s") == b"pending"
        ]

    def cascade_done(self, parent_id: str) -> None:
        self.client.srem(self.keys.cascade, parent_id)


def _item(raw: Sequence[Any]) -> OutboxItem:
    """An outbox entry as the relay takes it; one that cannot be read carries its problem."""
    eid, *pairs = raw
    entry: dict[str, Any] = {"eid": eid.decode()}
    for i in range(0, len(pairs), 2):
        entry[pairs[i].decode()] = pairs[i + 1]
    kind, backend = text(entry.get("kind")) or "", text(entry.get("backend")) or ""
    try:
        if kind == "enqueue":
            return OutboxItem(
                ref=entry["eid"],
                kind=kind,
                backend=backend,
                job=wire.job_from_body(json.loads(entry["body"])),
            )
        report = Report(
            parent_id=entry["parent_id"].decode(),
            child_id=entry["child_id"].decode(),
            state=entry["state"].decode(),
            result=entry.get("result"),
            result_type=text(entry.get("result_type")),
            error=text(entry.get("error")),
        )
        return OutboxItem(ref=entry["eid"], kind=kind, backend=backend, report=report)
    except Exception as exc:  # delivered as a failure: counted and kept, never blocking
        return OutboxItem(
            ref=entry["eid"],
            kind=kind,
            backend=backend,
            problem=f"unreadable outbox entry: {type(exc).__name__}: {exc}",
        )
