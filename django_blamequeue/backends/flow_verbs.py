"""The verbs of parent/child flows and of an engine's own outbox, apart from the job verbs
of ``backends/base.py`` (``Backend`` inherits them): a backend implements them only with
``supports_flows`` / ``has_outbox``. Cross-backend routing above the backends
(``routing``, ``outbox``, ``sweeper/flow_repair.py``) calls them; no backend calls another's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django_blamequeue.core.records import FlowState, OutboxItem, Report
from django_blamequeue.serializers import decode

if TYPE_CHECKING:
    from django_blamequeue.core.records import JobInfo


class FlowVerbs:
    # -- parent/child flows (only with ``supports_flows``) ----------------------------------
    def flow_state(self, parent_id: str) -> FlowState:
        """What ``collect`` sees: the tally, results and errors of a parent's children."""
        raise NotImplementedError

    def flow_states(self, parent_ids: Sequence[str]) -> dict[str, FlowState]:
        """``flow_state`` of several parents (the worker reads them with the claim that
        leased their ``collect``); a backend may answer in one round trip."""
        return {p: self.flow_state(p) for p in parent_ids}

    def deliver_reports(self, reports: Sequence[Report], now: datetime | None = None) -> int:
        """Record child reports on their parents' rows, once each; settle what is due."""
        raise NotImplementedError

    def report_terminal(self, ids: Sequence[str]) -> int:
        """Write reports for the terminal children among ``ids`` (same transaction)."""
        raise NotImplementedError

    def settle_reported(self, parent_ids: Sequence[str], now: datetime | None = None) -> list[str]:
        """Settle the due parents among ``parent_ids`` in a transaction of their own (the
        relay's step after an ack recorded reports on them, the flow sweeper's first check);
        answers the parents settled."""
        raise NotImplementedError

    def unsent_for(self, job_ids: Sequence[str], kind: str) -> set[str]:
        """The ids among ``job_ids`` that still have an unsent outbox row of ``kind``."""
        raise NotImplementedError

    def child_states(self, ids: Sequence[str]) -> dict[str, str]:
        """The state of each of these jobs that exists here (a backend may answer in one
        round trip)."""
        return {i.job_id: i.state for i in (self.get(j) for j in ids) if i is not None}

    # -- the flow sweeper's verbs (``sweeper/flow_repair.py`` runs the algorithm) ----------
    def waiting_parents(self, after: str, limit: int) -> list[str]:
        """Ids of parents parked in ``waiting_children``, in id order, after ``after``."""
        raise NotImplementedError

    def pending_children(self, parent_id: str) -> list[tuple[str, str]]:
        """``(child id, backend alias)`` of the parent's children that have not reported."""
        raise NotImplementedError

    def reland(self, parent_id: str, child_ids: Sequence[str], now: datetime | None = None) -> int:
        """Land these unreported children again from the parent's manifest (their full
        specs are there), only while the parent still waits for them (checked atomically
        with the landing); answers how many were landed."""
        raise NotImplementedError

    def cascade_due(self, limit: int) -> list[str]:
        """Parents that settled fail-fast or were cancelled while children may still run."""
        raise NotImplementedError

    def cascade(
        self, parent_id: str, now: datetime | None = None
    ) -> tuple[int, list[tuple[str, str]]]:
        """Cancel the parent's unfinished children here; answers how many, and the
        ``(backend alias, child id)`` of its unreported children on other backends."""
        raise NotImplementedError

    def cascade_done(self, parent_id: str) -> None:
        """Nothing is left to cancel for this parent elsewhere (a no-op where
        ``cascade_due`` is derived from the rows themselves)."""

    # -- an engine's own outbox (only with ``has_outbox``) ---------------------------------
    def take_outbox(self, limit: int, after: str = "") -> list[OutboxItem]:
        """Lease up to ``limit`` unsent entries after ``after`` (an earlier item's ``ref``)
        for this relay; an entry whose lease runs out is offered again."""
        raise NotImplementedError

    def outbox_done(self, items: Sequence[OutboxItem], error: str | None = None) -> None:
        """Delivered: forget these entries; with ``error``: keep them, count the attempt."""
        raise NotImplementedError

    def send_unsent(self, limit: int = 500) -> int:
        """With ``sends_later``: send jobs whose message a crash left unsent."""
        raise NotImplementedError

    def get(self, job_id: str) -> JobInfo | None:
        raise NotImplementedError  # declared by ``Backend`` (``child_states`` reads it)


def state_from_rows(rows: list[dict[str, Any]]) -> FlowState:
    """``FlowState`` from the parent's dependency rows (status, key, result, error)."""
    tally = {"done": 0, "failed": 0, "cancelled": 0, "pending": 0}
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    states: dict[str, str] = {}
    for row in rows:
        status = row["status"]
        tally[status if status in tally else "pending"] += 1
        states[row["key"]] = status
        if status == "done" and row["result"] is not None:
            results[row["key"]] = decode(
                row["result_type"] or "application/json", "utf-8", bytes(row["result"])
            )
        elif status == "done":
            results[row["key"]] = None
        if row["error"]:
            errors[row["key"]] = row["error"]
    return FlowState(
        completed=tally["done"],
        failed=tally["failed"],
        cancelled=tally["cancelled"],
        pending=tally["pending"],
        results=results,
        errors=errors,
        states=states,
    )
