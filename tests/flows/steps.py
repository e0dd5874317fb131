"""Deterministic steps for flow tests: claim, run through the worker's own runner, ack, relay.

The worker's threads and the relay's nudge thread make timing; these helpers take it out, so a
test decides exactly when each child runs and when each report is delivered. Handlers still go
through ``execution.invoke`` and ``lifecycle.decide``, so a step is what a worker would have done.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django_blamequeue.backends import get_backend
from django_blamequeue.backends.base import Backend
from django_blamequeue.context import JobContext, _current
from django_blamequeue.core import lifecycle
from django_blamequeue.core.records import Ack, AckResult, Claimed
from django_blamequeue.jobs import registry
from django_blamequeue.relay.outbox import Relay, RelayReport
from django_blamequeue.sweeper.flow_repair import FlowRepair
from django_blamequeue.worker import execution

Handler = Callable[[Any, JobContext], Any]


def outcome_of(alias: str, claimed: Claimed, handler: Handler | None = None) -> Ack:
    """Run one claimed job as a worker slot would and answer its ack (not yet applied)."""
    b = get_backend(alias)
    definition = registry.get(claimed.name)
    ctx = JobContext(
        job_id=claimed.job_id,
        queue=claimed.queue,
        name=claimed.name,
        attempt=claimed.attempt,
        max_attempts=claimed.max_attempts,
        trace_id=claimed.trace_id,
        backend=b,
        token=claimed.token,
    )
    run = execution.Run(
        claimed=claimed,
        ctx=ctx,
        started=0.0,
        deadline=None,
        renew_at=0.0,
        lease_until=0.0,
        definition=definition,
    )
    token = _current.set(ctx)
    try:
        outcome = execution.invoke(run, handler)
    finally:
        _current.reset(token)
    policy = lifecycle.Policy(retryable=definition.options.retryable if definition else None)
    transition = lifecycle.decide(
        outcome, attempt=claimed.attempt, max_attempts=claimed.max_attempts, policy=policy
    )
    return Ack(job_id=claimed.job_id, token=claimed.token, transition=transition)


def work(
    alias: str,
    queues: Sequence[str],
    *,
    limit: int = 1000,
    handler: Handler | None = None,
    now: datetime | None = None,
) -> list[AckResult]:
    """Claim what is due on ``queues`` (at ``now``), run it, apply the acks in one batch."""
    b = get_backend(alias)
    claimed = b.claim(list(queues), limit, 60, now)
    return b.apply_many([outcome_of(alias, c, handler) for c in claimed], now)


def relay(*databases: str) -> RelayReport:
    return Relay(list(databases) if databases else None).run_once()


def repair(backend: Backend, *, limit: int = 500) -> dict[str, int]:
    """One flow sweeper pass over ``backend``'s parents: every count, zero ones too."""
    return FlowRepair(backend, batch=limit).repair()


def run_to_end(alias: str, queues: Sequence[str], *, rounds: int = 100) -> int:
    """Work and relay until nothing moves; answer the number of acks applied."""
    total = 0
    for _ in range(rounds):
        acked = work(alias, queues)
        sent = relay()
        total += len(acked)
        if not acked and not sent:
            return total
    raise AssertionError(f"the flow still moved after {rounds} rounds")
