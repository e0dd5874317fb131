"""Which attempts a job's history keeps, and what each is called there (docs/admin.md)."""

from __future__ import annotations

from django_blamequeue.core.records import Transition

#: ``ATTEMPT_HISTORY`` levels: the attempts that did not end done, every one, none.
LEVELS = ("failures", "all", "off")
OUTCOMES = ("done", "retried", "failed", "cancelled", "stalled")


def outcome_of(state: str, transition: Transition) -> str | None:
    """How an applied ack ended its attempt (``state``: where the job went); None for an
    attempt given back (a graceful release, a snooze, a hand-back: no attempt was spent) and
    for a fan-out (its children are the history: the flow page shows them)."""
    if transition.give_back_attempt and state == "pending":
        return None
    return {"done": "done", "pending": "retried", "failed": "failed", "cancelled": "cancelled"}.get(
        state
    )


def kept(outcome: str | None, level: str) -> bool:
    """Whether ``ATTEMPT_HISTORY`` = ``level`` keeps an attempt that ended as ``outcome``."""
    if outcome is None or level == "off":
        return False
    return level == "all" or outcome != "done"
