"""The atomic run's completion, for backends whose job rows live in a Django database.

The handler of an ``@job(atomic=True)`` runs in a transaction on this very database, so its
fenced done ack (rule: fence) is simply one more statement of that transaction (rule:
effects-once): the writes and the completion commit together, or neither does. A stale token
matches no row: the caller rolls everything back. The SQS ledger owes SQS a message delete
after such a commit; its backend schedules it on commit.
"""

from __future__ import annotations

from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.core.records import AckResult, EffectsFence


def require_transaction(table: JobTable) -> None:
    """The fenced ack joins the atomic run's open transaction, never one of its own."""
    if not table.connection.in_atomic_block:
        raise RuntimeError("fence_effects runs inside the atomic run's transaction")


def answer(result: AckResult) -> EffectsFence:
    """rule: effects-once — the fenced ack decides whether the transaction may commit."""
    if not result.ok:
        return EffectsFence(kind="stale")
    return EffectsFence(kind="applied", state=result.state)
