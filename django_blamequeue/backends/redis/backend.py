"""The redis backend (docs/index.md): the job lifecycle on Redis ≥ 7, every multi-key step one Lua
script, so each is atomic and a crash (of a worker, or of Redis itself) never half-applies one.

Time is Redis ``TIME`` inside the scripts unless a verb is given ``now``. Enqueue is
idempotent by job id (the outbox relay may send twice). Claims and acks are batched: one
script call leases up to ``limit`` jobs, one applies a batch of acks, and ``apply_and_claim``
does both in one call per worker round.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django_blamequeue import audit
from django_blamequeue.backends.redis import lua
from django_blamequeue.backends.redis.codec import (
    Blobs,
    ack_rows,
    ack_spec,
    claimed_from,
    job_header,
    limits_spec,
)
from django_blamequeue.backends.redis.control import Control
from django_blamequeue.backends.redis.flows import Flows
from django_blamequeue.backends.redis.operations import Operations
from django_blamequeue.backends.rescuelog import log_rescued
from django_blamequeue.core.controls import QueueLimits
from django_blamequeue.core.records import (
    Ack,
    AckResult,
    Claimed,
    EnqueuedJob,
    LeaseSignals,
    NewJob,
    RescueReport,
)
from django_blamequeue.core.states import State

ENQUEUE_CHUNK = 1000  # jobs per script call: keeps each call short (Redis runs one at a time)
ACK_CHUNK = 500


class RedisBackend(Operations, Flows, Control):
    """Jobs in Redis (through django-redis or a URL); outbox and audit rows in Django."""

    # -- enqueue ---------------------------------------------------------------------------
    def enqueue_many(
        self,
        jobs: Sequence[NewJob],
        now: datetime | None = None,
        *,
        events: Sequence[audit.Event] = (),
    ) -> list[EnqueuedJob]:
        """All or none: batches over ``ENQUEUE_CHUNK`` go as several script calls inside one
        MULTI/EXEC. An id that exists already is answered as it is (not re-inserted)."""
        if not jobs:
            return []
        calls = []
        for start in range(0, len(jobs), ENQUEUE_CHUNK):
            chunk = jobs[start : start + ENQUEUE_CHUNK]
            calls.append(([job_header(j) for j in chunk], [j.payload.body for j in chunk]))
        replies = self._run_many("enqueue", calls, now)
        rows = [row for r in replies for row in r.result]
        answers = [
            EnqueuedJob(
                job_id=row[0].decode(),
                queue_name=j.queue,
                backend=self.alias,
                deduplicated=bool(int(row[1])),
            )
            for j, row in zip(jobs, rows, strict=True)
        ]
        self._after(replies, events)
        return answers

    # -- leasing ---------------------------------------------------------------------------
    @staticmethod
    def _claim_spec(
        queues: Sequence[str],
        limit: int,
        lease_s: float,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> list[Any]:
        """Queues, limit, lease, a random nonce the script derives the tokens from, and the
        settings' default limits of the queues claimed under limits (``limits.lua``)."""
        lease = str(round(lease_s * 1_000_000))
        limited = {q: limits_spec(lim) for q, lim in limits.items()} if limits else False
        return [list(queues), limit, lease, os.urandom(14).hex(), limited]

    def claim(
        self,
        queues: Sequence[str],
        limit: int,
        lease_s: float,
        now: datetime | None = None,
        *,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> list[Claimed]:
        if limit <= 0 or not queues:
            return []
        spec = self._claim_spec(queues, limit, lease_s, limits)
        reply = self._run("claim", spec, now=now, after=False)
        claimed = claimed_from(reply.result)
        self._after([reply], audit.start_events(claimed, self.alias))
        return claimed

    @staticmethod
    def _ack_batch(acks: Sequence[Ack], blobs: Blobs) -> list[Any]:
        return [ack_spec(a, blobs) for a in acks]

    def apply_many(self, acks: Sequence[Ack], now: datetime | None = None) -> list[AckResult]:
        results: list[AckResult] = []
        for start in range(0, len(acks), ACK_CHUNK):
            chunk = acks[start : start + ACK_CHUNK]
            blobs = Blobs()
            spec = self._ack_batch(chunk, blobs)
            reply = self._run("ack", spec, blobs, now, after=False)
            results += self._acked(chunk, ack_rows(reply.result), reply)
        return results

    def apply_and_claim(
        self,
        acks: Sequence[Ack],
        queues: Sequence[str],
        limit: int,
        lease_s: float,
        now: datetime | None = None,
        *,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> tuple[list[AckResult], list[Claimed]]:
        """The acks and the next claim in one script: one round trip per worker round."""
        if len(acks) > ACK_CHUNK:
            results = self.apply_many(acks, now)
            return results, self.claim(queues, limit, lease_s, now, limits=limits)
        if limit <= 0 or not queues:
            return self.apply_many(acks, now), []
        blobs = Blobs()
        spec = [self._ack_batch(acks, blobs), self._claim_spec(queues, limit, lease_s, limits)]
        reply = self._run("ack_claim", spec, blobs, now, after=False)
        rows, claimed_rows = reply.result
        claimed = claimed_from(claimed_rows)
        return self._acked(
            acks, ack_rows(rows), reply, audit.start_events(claimed, self.alias)
        ), claimed

    def _acked(
        self,
        acks: Sequence[Ack],
        rows: Sequence[Any],
        reply: lua.Reply,
        events: Sequence[audit.Event] = (),
    ) -> list[AckResult]:
        """AckResults of a batch, and its audit events (as the local backend records them)."""
        results: list[AckResult] = []
        evs = list(events)
        success = audit.needed(audit.CONSUME_SUCCESS)
        for a, row in zip(acks, rows, strict=True):
            ok = bool(row[1])
            state = State(row[2]) if ok else None
            results.append(AckResult(job_id=a.job_id, ok=ok, state=state))
            if not ok and a.transition.state != State.WAITING_CHILDREN:
                evs.append(audit.lock_lost(a.job_id, self.alias, a.transition.state.value))
            elif ok and not row[6]:
                name = row[5].decode() if isinstance(row[5], bytes) else row[5]
                evs += audit.ack_events(
                    a.transition,
                    state,
                    job_id=a.job_id,
                    queue=row[3],
                    backend=self.alias,
                    attempt=int(row[4]),
                    name=name,
                    happy=success,
                )
        self._after([reply], evs)
        return results

    def extend_lease(
        self, job_id: str, token: str, seconds: float, now: datetime | None = None
    ) -> bool:
        reply = self._run("extend", [job_id, token, str(round(seconds * 1_000_000))], now=now)
        changed = bool(int(reply.result))
        if changed and audit.needed(audit.LEASE_EXTENDED):
            data = {"seconds": seconds}
            event = audit.Event(
                action=audit.LEASE_EXTENDED, job_id=job_id, backend=self.alias, data=data
            )
            audit.record([event], using=self.audit_db)
        return changed

    def set_progress(self, job_id: str, token: str, progress: int) -> bool:
        changed = bool(int(self._run("progress", [job_id, token, int(progress)]).result))
        if changed and audit.needed(audit.PROGRESS):
            data = {"progress": progress}
            event = audit.Event(action=audit.PROGRESS, job_id=job_id, backend=self.alias, data=data)
            audit.record([event], using=self.audit_db)
        return changed

    def save_checkpoints(
        self, items: Sequence[tuple[str, str, str]], now: datetime | None = None
    ) -> frozenset[str]:
        if not items:
            return frozenset()
        latest = {job_id: (token, text) for job_id, token, text in items}
        spec = [[job_id, token, text] for job_id, (token, text) in latest.items()]
        return frozenset(lua.text(x) for x in self._run("checkpoint", spec, now=now).result)

    def renew_leases(
        self, leases: Sequence[tuple[str, str]], seconds: float, now: datetime | None = None
    ) -> frozenset[str]:
        if not leases:
            return frozenset()
        spec = [str(round(seconds * 1_000_000)), [list(lease) for lease in leases]]
        return frozenset(x.decode() for x in self._run("renew", spec, now=now).result)

    def lease_signals(self, leases: Sequence[tuple[str, str]]) -> LeaseSignals:
        if not leases:
            return LeaseSignals()
        pipe = self.client.pipeline(transaction=False)
        for job_id, _ in leases:
            pipe.hmget(self.keys.job(job_id), "token", "state", "cancel_req")
        lost: set[str] = set()
        cancel: set[str] = set()
        for (job_id, token), (held, state, requested) in zip(leases, pipe.execute(), strict=True):
            if held is None or held.decode() != token or state != b"inflight":
                lost.add(job_id)
            elif requested == b"1":
                cancel.add(job_id)
        return LeaseSignals(lost=frozenset(lost), cancel_requested=frozenset(cancel))

    def rescue_expired(
        self, now: datetime | None = None, limit: int = 1000, *, max_stalled: int = 1
    ) -> RescueReport:
        repended, failed, cancelled, rows = self._run(
            "rescue", [limit, max_stalled], now=now
        ).result
        if rows:
            log_rescued(self.alias, [tuple(r) for r in json.loads(rows)])
        return RescueReport(repended=repended, failed=failed, cancelled=cancelled)

    def run_alone(self, job_id: str, token: str) -> bool:
        return bool(int(self._run("alone", [job_id, token]).result))


__all__ = ["RedisBackend"]
