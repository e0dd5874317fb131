"""The lifecycle rules that must also run inside a storage engine, each stated once.

Most rules are decided here in Python (``lifecycle.decide``) and a backend only applies the
answer. A few must be evaluated where the data is — in one SQL statement, one Lua script or
one SQS step — to be atomic with the write they guard. Those are listed in ``RULES`` with the
function below that is their reference; each engine's copy carries the rule's id in a comment
(``rule: settle-due``), and docs/design.md maps rule → core function → SQL → Lua → SQS. The
texts and names an engine writes (messages, audit actions) come from here or ``audit``: the
Lua scripts receive them generated (``backends/redis/lua.py``), never typed again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django_blamequeue.core.states import State

#: The error a rescued job carries (an expired lease: the worker crashed or stalled).
STALLED_MESSAGE = "the lease expired before the worker acked (worker crashed or stalled)"
#: ``on_child_failure`` that lets a flow run on after a child failed.
CONTINUE = "continue"


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    says: str
    reference: str  # the Python function that states it


RULES: tuple[Rule, ...] = (
    Rule(
        "fence",
        "An ack (or a checkpoint) changes a job only while it is inflight under the ack's "
        "lease token; otherwise it changes nothing and is answered LOCK_LOST.",
        "core.rules.fenced",
    ),
    Rule(
        "cancel-wins",
        "A cancel requested while a job runs turns every transition that yields to it (all "
        "but success and a fan-out) into cancelled.",
        "core.rules.after_cancel_request",
    ),
    Rule(
        "rescue",
        "An expired lease goes back to pending with one more stall; on its last attempt it "
        "fails as stalled, and past MAX_STALLED_COUNT too if it ran alone in its worker (a job "
        "that reached the count runs alone: a crash in company convicts nobody); asked to "
        "cancel, it is cancelled.",
        "core.lifecycle.rescue",
    ),
    Rule(
        "dlq-retry",
        "A failed job goes back to pending, due now, with a fresh attempt budget (attempts, "
        "stalls, progress and any cancel request reset; its last error kept until the next "
        "attempt); one whose dedupe key a live job now holds stays in the DLQ.",
        "core.rules.DLQ_RETRY_RESETS",
    ),
    Rule(
        "dag-release",
        "A blocked job becomes pending once every dependency is done; a dependency not "
        "stored yet counts as not done.",
        "core.rules.released",
    ),
    Rule(
        "report-once",
        "A child's report is recorded only on its parent's manifest row while that row is "
        "pending, so a repeated report changes nothing.",
        "core.rules.records_report",
    ),
    Rule(
        "settle-due",
        "A waiting parent is due when none of its children is pending, or — unless its "
        "on_child_failure is 'continue' — as soon as one failed.",
        "core.rules.settle_due",
    ),
    Rule(
        "paused",
        "A claim takes nothing from a paused queue (jobs already in flight finish normally).",
        "core.rules.claims_from",
    ),
    Rule(
        "limits",
        "A claim takes at most concurrency minus the queue's jobs in flight, and at most the "
        "rate limit's max minus the starts in its window; it skips (never stops at) a job "
        "whose key has key_concurrency jobs in flight or key_rate_limit starts in its window.",
        "core.limits.claimable",
    ),
    Rule(
        "shares",
        "Under key_weights a claim serves first the waiting key with the fewest jobs in "
        "flight per unit of its weight (the jobs it took before counted), ties to the heavier "
        "key; within a key, claim order.",
        "core.limits.by_share",
    ),
    Rule(
        "effects-once",
        "An atomic job's writes commit only together with its completion: in the transaction "
        "of its fenced done ack, or, where the engine's ack cannot join that transaction, with "
        "the job's one completion mark; a run that finds its lease stale or the mark taken "
        "rolls its writes back.",
        "core.rules.commits_effects",
    ),
    Rule(
        "unique",
        "A unique job holds its key while its state is one of its unique states and its "
        "window (if any) lasts; an enqueue of a held key is absorbed by the holder (skip, "
        "replace, debounce) or refused (reject); a holder that no longer holds is taken over "
        "by the next enqueue of its key, never given the key back.",
        "core.unique.holds",
    ),
    Rule(
        "expiry",
        "A claim never leases a job whose expires_at has passed; such a waiting job is "
        "cancelled with reason 'expired' (by the claim that meets it where the engine can, "
        "else by the sweeper), so it never starts.",
        "core.rules.expired",
    ),
    Rule(
        "cascade",
        "A parent that settled with children still pending, or was cancelled, cancels its "
        "unfinished children: waiting ones at once, running ones by request.",
        "core.rules.cascades",
    ),
)


def fenced(*, state: State, held_token: str | None, ack_token: str) -> bool:
    """rule: fence — may an ack with ``ack_token`` change this job?"""
    return state == State.INFLIGHT and held_token is not None and held_token == ack_token


def after_cancel_request(target: State, *, yields_to_cancel: bool) -> State:
    """rule: cancel-wins — the state an ack lands in when a cancel was requested."""
    return State.CANCELLED if yields_to_cancel else target


#: rule: dlq-retry — the fields a DLQ retry sets, with their new values ("now": the clock).
DLQ_RETRY_RESETS: dict[str, object] = {
    "state": State.PENDING.value,
    "attempts": 0,
    "stalls": 0,
    "cancel_requested": False,
    "progress": 0,
    "available_at": "now",
    "finished_at": None,
}


def expired(expires_at: datetime | None, now: datetime) -> bool:
    """rule: expiry — a job past its ``expires_at`` is not started (None: it never expires)."""
    return expires_at is not None and expires_at <= now


def claims_from(*, paused: bool) -> bool:
    """rule: paused — may a claim take jobs of this queue?"""
    return not paused


def released(dependency_states: Iterable[State | None]) -> bool:
    """rule: dag-release — ``None`` is a dependency not stored yet."""
    return all(s == State.DONE for s in dependency_states)


def records_report(row_status: str) -> bool:
    """rule: report-once."""
    return row_status == "pending"


def fails_fast(mode: str | None) -> bool:
    """Does a child's failure settle the parent at once (``on_child_failure`` not 'continue')?"""
    return mode != CONTINUE


def settle_due(*, mode: str | None, pending: int, failed: int) -> bool:
    """rule: settle-due — ``mode`` is the parent's ``on_child_failure``."""
    return pending == 0 or (fails_fast(mode) and failed > 0)


def commits_effects(*, ack_applied: bool | None, mark_inserted: bool | None) -> bool:
    """rule: effects-once — may an atomic run's transaction commit? ``ack_applied``: its
    fenced done ack changed the job in this transaction (None: the engine's ack cannot join
    it); ``mark_inserted``: its completion mark was new (None: no mark is needed)."""
    if ack_applied is not None:
        return ack_applied
    return bool(mark_inserted)


def cascades(*, parent: State, pending_children: int) -> bool:
    """rule: cascade — must this parent cancel its unfinished children? Yes once it no longer
    waits for them (settled fail-fast, then maybe collected; or cancelled)."""
    return pending_children > 0 and parent != State.WAITING_CHILDREN
