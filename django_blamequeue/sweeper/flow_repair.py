"""The flow sweeper: repairs what the push path of parent/child flows missed (docs/flows.md).

One algorithm for every backend, over the narrow verbs of ``Backend`` (the parent's
backend and, through ``routing``, each child's): settle a parent with nothing pending;
re-land children that never landed; synthesize reports for terminal children whose report
was lost; cancel children left running after a fail-fast settle or a cancel. Each parent
is mended on its own, so one bad row is logged and skipped, never blocking the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from functools import partial

from django_blamequeue.backends.base import Backend
from django_blamequeue.core.states import TERMINAL
from django_blamequeue.relay import routing

logger = logging.getLogger("django_blamequeue.flows")
_TERMINAL = frozenset(s.value for s in TERMINAL)
KINDS = ("relanded", "synthesized", "settled", "cascaded", "skipped")


class FlowRepair:
    paced = True  # reads the job table's indexes: spaced out when a pass is slow

    def __init__(self, backend: Backend, *, period: float = 30.0, batch: int = 500) -> None:
        self.backend = backend
        self.period = period
        self.batch = batch
        self.name = f"flow_repair[{backend.alias}]"

    def run_once(self, now: datetime | None = None) -> dict[str, int]:
        """A pass through the breaker; answers the kinds of repair that happened."""
        result = self.backend.resilience.call(lambda: self.repair(now))
        return {k: v for k, v in result.items() if v}

    def repair(self, now: datetime | None = None) -> dict[str, int]:
        """Every waiting parent, a page of ``batch`` at a time; then the cascades owed."""
        counts = dict.fromkeys(KINDS, 0)
        after = ""
        while True:
            page = self.backend.waiting_parents(after, self.batch)
            for parent_id in page:
                self._isolated("repair", parent_id, counts, partial(self._mend, parent_id, now))
            if len(page) < self.batch:
                break
            after = page[-1]
        for parent_id in self.backend.cascade_due(self.batch):
            self._isolated("cascade", parent_id, counts, partial(self._cascade, parent_id, now))
        return counts

    @staticmethod
    def _isolated(
        what: str, parent_id: str, counts: dict[str, int], step: Callable[[dict[str, int]], None]
    ) -> None:
        try:
            step(counts)
        except Exception as exc:
            counts["skipped"] += 1
            logger.warning(
                "flow %s skipped parent %s: %s: %s", what, parent_id, type(exc).__name__, exc
            )

    def _mend(self, parent_id: str, now: datetime | None, counts: dict[str, int]) -> None:
        parent = self.backend
        if parent.settle_reported([parent_id], now):  # nothing pending, or a failure: "fail"
            counts["settled"] += 1
            return
        by_backend: dict[str, list[str]] = {}
        for child_id, alias in parent.pending_children(parent_id):
            by_backend.setdefault(alias, []).append(child_id)
        for alias, ids in by_backend.items():
            target = parent if alias == parent.alias else routing.target(alias)
            found = target.child_states(ids)
            in_flight = parent.unsent_for(ids, "enqueue")  # on its way through the outbox
            missing = [j for j in ids if j not in found and j not in in_flight]
            if missing:
                counts["relanded"] += parent.reland(parent_id, missing, now)
            terminal = [j for j, state in found.items() if state in _TERMINAL]
            if terminal:
                lost = sorted(set(terminal) - target.unsent_for(terminal, "report"))
                if lost:
                    counts["synthesized"] += target.report_terminal(lost)

    def _cascade(self, parent_id: str, now: datetime | None, counts: dict[str, int]) -> None:
        """Cancel what still runs of a settled or cancelled parent's children, here and on
        other backends; the parent is forgotten once nothing was left to cancel."""
        n, elsewhere = self.backend.cascade(parent_id, now)
        for alias, child_id in elsewhere:
            target = routing.target(alias)
            state = target.child_states([child_id]).get(child_id)
            if state is not None and state not in _TERMINAL:
                target.cancel(child_id)
                n += 1
        if n == 0:
            self.backend.cascade_done(parent_id)
        counts["cascaded"] += n
