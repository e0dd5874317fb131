"""Parent/child flows on the redis backend, its repair pass, and its outbox relay.

A child's terminal transition reports in the same script: onto its parent's manifest (and
the parent settles there and then) when the parent is on this backend, else into this
Redis's outbox, bound for the parent's backend. ``drain_outbox`` delivers those entries (and
the enqueues of children that live elsewhere), at least once; targets record them once.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ... import outbox
from ...core.states import TERMINAL
from ...records import ChildSpec, NewJob, Report
from .base import RedisBase
from .codec import Blobs, child_spec, report_spec, text

if TYPE_CHECKING:
    from ...fanout import FlowState

logger = logging.getLogger("django_blamequeue.flows")
_TERMINAL = frozenset(s.value for s in TERMINAL)
OUTBOX_LEASE_S = 30.0  # a relay that dies mid-send leaves its entries for this long


class FlowOps(RedisBase):
    def _manifest(self, parent_id: str) -> dict[str, dict[str, Any]]:
        """child id → {"s": status, "k": key, "b": backend, "j": spec, "r", "t", "e"}."""
        children: dict[str, dict[str, Any]] = {}
        for field, value in self.client.hgetall(self.keys.manifest(parent_id)).items():
            kind, _, child = field.decode().partition(":")
            children.setdefault(child, {})[kind] = value
        return children

    def flow_state(self, parent_id: str) -> FlowState:
        from ...fanout import state_from_rows

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

    # -- the outbox relay ------------------------------------------------------------------
    def drain_outbox(self, limit: int = 500) -> tuple[int, int]:
        """Deliver unsent entries grouped by (kind, target); a group that fails is retried
        entry by entry, and an entry that still fails is counted, kept and retried later."""
        sent = skipped = 0
        cursor = 0  # entries are numbered in order: a pass never takes one twice
        while True:
            lease = round(OUTBOX_LEASE_S * 1_000_000)
            taken = self._run("outbox_take", [limit, lease, cursor]).result
            entries = [_entry(raw) for raw in taken]
            if not entries:
                return sent, skipped
            cursor = max(int(e["eid"]) for e in entries)
            groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for e in entries:
                groups.setdefault((e["kind"], e["backend"]), []).append(e)
            for (kind, alias), group in groups.items():
                done, left = outbox.deliver_isolated(
                    kind,
                    alias,
                    group,
                    functools.partial(self._send_entries, kind, alias),
                    lambda entry, error: self._settled([entry], error=error),
                    lambda entry: f"entry {entry['eid']}",
                )
                sent += done
                skipped += left
            if len(entries) < limit:
                return sent, skipped

    def _send_entries(self, kind: str, alias: str, entries: list[dict[str, Any]]) -> None:
        _deliver(kind, alias, entries)
        self._settled(entries)

    def _settled(self, entries: Sequence[dict[str, Any]], error: str | None = None) -> None:
        spec = ["done" if error is None else "failed", [[e["eid"], error or ""] for e in entries]]
        self._run("outbox_done", spec)

    # -- repair (the flow sweeper) -----------------------------------------------------------
    def repair_flows(self, now: datetime | None = None, limit: int = 500) -> dict[str, int]:
        """Re-land children that never landed, synthesize reports lost on other backends,
        settle parents with nothing pending, cancel children left running elsewhere after a
        settle or a cancel. Pages through every parked parent; one bad parent is logged and
        skipped, never blocking the rest."""
        counts = {"relanded": 0, "synthesized": 0, "settled": 0, "cascaded": 0, "skipped": 0}
        cursor = b"-"
        while True:
            page = self.client.zrangebylex(self.keys.waiting, cursor, b"+", 0, limit)
            for raw in page:
                parent_id = raw.decode()
                try:
                    self._repair_parent(parent_id, now, counts)
                except Exception as exc:
                    counts["skipped"] += 1
                    logger.warning("flow repair skipped parent %s: %s", parent_id, exc)
            if len(page) < limit:
                break
            cursor = b"(" + page[-1]
        for raw in self.client.smembers(self.keys.cascade):
            parent_id = raw.decode()
            try:
                counts["cascaded"] += self._cascade_remote(parent_id)
            except Exception as exc:
                counts["skipped"] += 1
                logger.warning("flow cascade skipped parent %s: %s", parent_id, exc)
        return counts

    def _repair_parent(self, parent_id: str, now: datetime | None, counts: dict[str, int]) -> None:
        from .. import get_backend

        manifest = self._manifest(parent_id)
        pending = {c: m for c, m in manifest.items() if m.get("s") == b"pending"}
        if not pending:
            settled = self._run("settle", [parent_id], now=now).result
            counts["settled"] += len(settled)
            return
        by_backend: dict[str, list[str]] = {}
        for child_id, m in pending.items():
            by_backend.setdefault(text(m.get("b")) or self.alias, []).append(child_id)
        for alias, ids in by_backend.items():
            target = self if alias == self.alias else get_backend(alias)
            found = _states(target, ids)
            in_flight = self.unsent_for(ids, "enqueue")
            missing = [j for j in ids if j not in found and j not in in_flight]
            if missing:
                blobs = Blobs()
                children = []
                for child_id in missing:
                    m = pending[child_id]
                    job = outbox.job_from_body(json.loads(m["j"]))
                    spec = ChildSpec(key=text(m.get("k")) or "", job=job, backend=alias)
                    children.append(child_spec(spec, blobs))
                reply = self._run("reland", [parent_id, children], blobs, now)
                counts["relanded"] += int(reply.result)
            terminal = [j for j, st in found.items() if st in _TERMINAL]
            if terminal:
                lost = sorted(set(terminal) - target.unsent_for(terminal, "report"))
                if lost:
                    counts["synthesized"] += target.report_terminal(lost)

    def _cascade_remote(self, parent_id: str) -> int:
        """Cancel this parent's unfinished children on other backends (after a fail-fast
        settle or a cancel); forget the parent once none is left."""
        from .. import get_backend

        info = self.client.hget(self.keys.job(parent_id), "state")
        if info == b"waiting_children" or info is None:
            self.client.srem(self.keys.cascade, parent_id)
            return 0
        live: list[tuple[str, str]] = []
        for child_id, m in self._manifest(parent_id).items():
            alias = text(m.get("b")) or self.alias
            if alias != self.alias and m.get("s") == b"pending":
                live.append((alias, child_id))
        n = 0
        for alias, child_id in live:
            target = get_backend(alias)
            state = _states(target, [child_id]).get(child_id)
            if state is not None and state not in _TERMINAL:
                target.cancel(child_id)
                n += 1
        if n == 0:
            self.client.srem(self.keys.cascade, parent_id)
        return n


def _entry(raw: Sequence[Any]) -> dict[str, Any]:
    eid, *pairs = raw
    entry: dict[str, Any] = {"eid": eid.decode()}
    for i in range(0, len(pairs), 2):
        entry[pairs[i].decode()] = pairs[i + 1]
    for name in ("kind", "backend", "job_id", "parent_id", "child_id", "state", "result_type"):
        if name in entry:
            entry[name] = entry[name].decode()
    return entry


def _deliver(kind: str, alias: str, entries: Sequence[dict[str, Any]]) -> None:
    from .. import get_backend

    target = get_backend(alias)
    if kind == "enqueue":
        jobs: list[NewJob] = [outbox.job_from_body(json.loads(e["body"])) for e in entries]
        target.enqueue_many(jobs)
    elif kind == "report":
        target.deliver_reports(
            [
                Report(
                    parent_id=e["parent_id"],
                    child_id=e["child_id"],
                    state=e["state"],
                    result=e.get("result"),
                    result_type=e.get("result_type"),
                    error=text(e.get("error")),
                )
                for e in entries
            ]
        )
    else:
        raise ValueError(f"unknown outbox kind {kind!r}")


def _states(target: Any, ids: Sequence[str]) -> dict[str, str]:
    lookup = getattr(target, "child_states", None)
    if lookup is not None:
        return lookup(ids)  # type: ignore[no-any-return]
    return {i.job_id: i.state for i in (target.get(j) for j in ids) if i is not None}
