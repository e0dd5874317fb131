"""The redis backend (docs/index.md): the job lifecycle on Redis ≥ 7, every multi-key step one Lua
script, so each is atomic and a crash (of a worker, or of Redis itself) never half-applies one.

Time is Redis ``TIME`` inside the scripts unless a verb is given ``now``. Enqueue is
idempotent by job id (the outbox relay may send twice). Claims and acks are batched: one
script call leases up to ``limit`` jobs, one applies a batch of acks, and ``apply_and_claim``
does both in one call per worker round. Reads that need no atomicity are pipelines; every
write is a script (``ScriptRunner`` runs them and does what each leaves for Python).

Flows: a child's terminal transition reports in the same script, onto its parent's manifest
(and the parent settles there and then) when the parent is on this backend, else into this
Redis's outbox, bound for the parent's backend. The relay takes those entries (and the
enqueues of children that live elsewhere) with ``take_outbox`` and delivers them, at least
once; targets record them once.

Queue control: each change is one script (``control.lua``) that updates the queue's control
hash, bumps its version and publishes on ``P:ctlwake``; every claim script reads the hash
itself (``limits.lua``), so pause and limits hold for every worker from the moment the script
ran. The audit row (with the acting user) follows the script.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django_blamequeue import audit
from django_blamequeue.backends import wakeup
from django_blamequeue.backends.base import Backend
from django_blamequeue.backends.flowstate import state_from_rows
from django_blamequeue.backends.redis import lua, rotation
from django_blamequeue.backends.redis.claims import claimed_from
from django_blamequeue.backends.redis.codec import (
    HISTORY_LEVELS,
    Blobs,
    ack_rows,
    ack_spec,
    child_spec,
    claim_spec,
    control_from,
    info_from,
    job_header,
    limits_spec,
    outbox_item,
    report_spec,
    stats_from,
    text,
)
from django_blamequeue.backends.redis.connection import UNAVAILABLE, warnings
from django_blamequeue.backends.redis.keys import Keys, from_us, to_us
from django_blamequeue.backends.redis.listen import RedisListener
from django_blamequeue.backends.redis.runner import ScriptRunner
from django_blamequeue.backends.rescuelog import log_rescued
from django_blamequeue.conf import BackendConfig, get_settings
from django_blamequeue.core import unique, wire
from django_blamequeue.core.controls import ControlState, HandlerWait, QueueLimits
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import (
    Ack,
    AckResult,
    AttemptInfo,
    Backlog,
    CancelResult,
    ChildSpec,
    Claimed,
    EnqueuedJob,
    FlowState,
    JobInfo,
    KeyRotation,
    LeaseSignals,
    NewJob,
    OutboxItem,
    PruneReport,
    QueueStats,
    Report,
    RescueReport,
)
from django_blamequeue.core.states import State
from django_blamequeue.core.timeseries import RESOLUTIONS, SLOTS, Bucket, Sample, merged
from django_blamequeue.models import OutboxEntry

logger = logging.getLogger("django_blamequeue.redis")
ENQUEUE_CHUNK = 1000  # jobs per script call: keeps each call short (Redis runs one at a time)
ACK_CHUNK = 500
PURGE_CHUNK = 5000
RETRY_CHUNK = 1000
NAMES_CAP = 100_000  # jobs per queue ``waiting_names`` looks at
OUTBOX_LEASE_S = 30.0  # a relay that dies mid-send leaves its entries for this long
_STATES = {s.value: s for s in State}  # an ack reply's state text, read once per ack


class RedisBackend(Backend):
    """Jobs in Redis (through django-redis or a URL); outbox and audit rows in Django."""

    protocol = "redis"
    supports_listen = True
    supports_flows = True
    supports_apply_and_claim = True
    supports_key_rotation = True
    has_outbox = True
    expires_buckets = True  # each bucket's hash expires once its window has passed
    #: How idle workers are woken (the worker's banner shows it).
    wake_up = "pub/sub (SUBSCRIBE)"
    unavailable_errors: tuple[type[BaseException], ...] = UNAVAILABLE

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        options = config.options
        self.keys = Keys(str(options.get("KEY_PREFIX") or "blamequeue"))
        #: The Django database of this backend's audit rows (and of the outbox table an
        #: enqueue inside ``transaction.atomic()`` goes through).
        self.audit_db = str(options.get("DATABASE") or "default")
        self.scripts = ScriptRunner(self.alias, options, self.keys, self.audit_db)
        self._warned = False

    @property
    def client(self) -> Any:
        return self.scripts.client

    @property
    def engine_label(self) -> str:
        """What the worker's banner calls the engine: on a cluster, with the one hash slot
        that holds every key of this backend (``redis-cli cluster shards`` names its primary)."""
        if not self.config.options.get("CLUSTER"):
            return "redis"
        from redis.crc import key_slot

        return f"Redis Cluster, slot {key_slot(self.keys.prefix.encode())}"

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
        # A batch that may refuse a unique conflict is one script: it checks before it writes.
        chunk_size = len(jobs) if any(j.unique_mode == "reject" for j in jobs) else ENQUEUE_CHUNK
        calls = []
        for start in range(0, len(jobs), chunk_size):
            chunk = jobs[start : start + chunk_size]
            calls.append(([job_header(j) for j in chunk], [j.payload.body for j in chunk]))
        replies = self.scripts.run_many("enqueue", calls, now)
        rows = [row for r in replies for row in r.result]
        if rows and rows[0][1] == b"DUPLICATE":
            _, _, holder, state, key = (text(v) or "" for v in rows[0])
            raise unique.duplicate(key, holder, state)
        answers = [
            EnqueuedJob(
                job_id=row[0].decode(),
                queue_name=j.queue,
                backend=self.alias,
                deduplicated=bool(int(row[1])),
                conflict=text(row[2]) or None,
            )
            for j, row in zip(jobs, rows, strict=True)
        ]
        self.scripts.after(replies, events)
        return answers

    # -- leasing ---------------------------------------------------------------------------
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
        spec = claim_spec(queues, limit, lease_s, limits)
        reply = self.scripts.run("claim", spec, now=now, after=False)
        claimed = claimed_from(reply.result)
        self.scripts.after([reply], audit.start_events(claimed, self.alias))
        return claimed

    def apply_many(self, acks: Sequence[Ack], now: datetime | None = None) -> list[AckResult]:
        results: list[AckResult] = []
        for start in range(0, len(acks), ACK_CHUNK):
            chunk = acks[start : start + ACK_CHUNK]
            blobs = Blobs()
            history = get_settings().attempt_history
            spec = [ack_spec(a, blobs, history) for a in chunk]
            reply = self.scripts.run("ack", spec, blobs, now, after=False)
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
        history = get_settings().attempt_history
        spec = [
            [ack_spec(a, blobs, history) for a in acks],
            claim_spec(queues, limit, lease_s, limits),
        ]
        reply = self.scripts.run("ack_claim", spec, blobs, now, after=False)
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
            state = _STATES[row[2]] if ok else None
            results.append(AckResult(job_id=a.job_id, ok=ok, state=state))
            if not ok and a.transition.state != State.WAITING_CHILDREN:
                evs.append(audit.lock_lost(a.job_id, self.alias, a.transition.state.value))
            elif ok and not row[6] and (success or state is not State.DONE):
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
        self.scripts.after([reply], evs)
        return results

    def extend_lease(
        self, job_id: str, token: str, seconds: float, now: datetime | None = None
    ) -> bool:
        reply = self.scripts.run(
            "extend", [job_id, token, str(round(seconds * 1_000_000))], now=now
        )
        changed = bool(int(reply.result))
        if changed and audit.needed(audit.LEASE_EXTENDED):
            data = {"seconds": seconds}
            event = audit.Event(
                action=audit.LEASE_EXTENDED, job_id=job_id, backend=self.alias, data=data
            )
            audit.record([event], using=self.audit_db)
        return changed

    def wake(self, job_ids: Sequence[str], now: datetime | None = None) -> int:
        if not job_ids:
            return 0
        return int(self.scripts.run("wake", list(job_ids), now=now).result)

    def set_progress(self, job_id: str, token: str, progress: int) -> bool:
        changed = bool(int(self.scripts.run("progress", [job_id, token, int(progress)]).result))
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
        return frozenset(lua.text(x) for x in self.scripts.run("checkpoint", spec, now=now).result)

    def renew_leases(
        self, leases: Sequence[tuple[str, str]], seconds: float, now: datetime | None = None
    ) -> frozenset[str]:
        if not leases:
            return frozenset()
        spec = [str(round(seconds * 1_000_000)), [list(lease) for lease in leases]]
        return frozenset(x.decode() for x in self.scripts.run("renew", spec, now=now).result)

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
        level = HISTORY_LEVELS[get_settings().attempt_history]
        repended, failed, cancelled, rows = self.scripts.run(
            "rescue", [limit, max_stalled, level], now=now
        ).result
        if rows:
            log_rescued(self.alias, [tuple(r) for r in json.loads(rows)])
        return RescueReport(repended=repended, failed=failed, cancelled=cancelled)

    def expire(self, now: datetime | None = None, limit: int = 500) -> list[str]:
        ids = self.scripts.run("expire", [limit], now=now).result
        return [i.decode() if isinstance(i, bytes) else str(i) for i in ids or []]

    def run_alone(self, job_id: str, token: str) -> bool:
        return bool(int(self.scripts.run("alone", [job_id, token]).result))

    # -- operations ------------------------------------------------------------------------
    def cancel(self, job_id: str, now: datetime | None = None) -> CancelResult:
        found, cancelled, requested, state = self.scripts.run("cancel", [job_id], now=now).result
        if not int(found):
            return CancelResult(found=False)
        return CancelResult(
            found=True,
            cancelled=bool(int(cancelled)),
            requested=bool(int(requested)),
            state=State(state.decode()),
        )

    def _waiting_ids(self, queue: str) -> list[str]:
        """The ids in the queue's ready, delayed and blocked indexes (ready members carry
        16 digits of ``available_at`` before the id)."""
        c, k = self.client, self.keys
        ready = [m.decode()[16:] for m, _ in c.zscan_iter(k.queue(queue, "ready"), count=1000)]
        delayed = [m.decode() for m, _ in c.zscan_iter(k.queue(queue, "delayed"), count=1000)]
        blocked = [m.decode() for m in c.sscan_iter(k.queue(queue, "blocked"), count=1000)]
        return list(dict.fromkeys([*ready, *delayed, *blocked]))

    def cancel_flow(self, flow_id: str, now: datetime | None = None) -> int:
        return int(self.scripts.run("cancel_flow", [flow_id], now=now).result)

    def purge(self, queue: str, created_before: datetime | None = None) -> int:
        """Waiting jobs are deleted ``PURGE_CHUNK`` per script call (each call atomic). With
        ``created_before``, the waiting ids are read first (a page at a time, outside the
        scripts) and each script call deletes those of a chunk still waiting and created by
        then; a job enqueued since is kept."""
        total = 0
        if created_before is not None:
            ids = self._waiting_ids(queue)
            for start in range(0, len(ids), PURGE_CHUNK):
                spec = [queue, PURGE_CHUNK, to_us(created_before), ids[start : start + PURGE_CHUNK]]
                total += int(self.scripts.run("purge", spec).result)
        else:
            while True:
                n = int(self.scripts.run("purge", [queue, PURGE_CHUNK]).result)
                total += n
                if n < PURGE_CHUNK:
                    break
        event = audit.Event(
            action=audit.PURGE, queue=queue, backend=self.alias, data={"count": total}
        )
        audit.record([event], using=self.audit_db)
        return total

    def _hashes(self, ids: Sequence[str]) -> list[JobInfo]:
        pipe = self.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hgetall(self.keys.job(job_id))
        return [info_from(raw, self.alias) for raw in pipe.execute() if raw]

    def get(self, job_id: str) -> JobInfo | None:
        raw = self.client.hgetall(self.keys.job(job_id))
        return info_from(raw, self.alias) if raw else None

    def jobs_about(self, about: str, limit: int) -> list[JobInfo]:
        """Newest first from the ``P:about:KEY`` index (written by the enqueue script)."""
        ids = self.client.zrevrange(self.keys.about(about), 0, limit - 1)
        return self._hashes([i.decode() for i in ids])

    def size(self, queue: str) -> int:
        k = self.keys
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(k.queue(queue, "ready"))
        pipe.zcard(k.queue(queue, "delayed"))
        pipe.hget(k.leased, queue)
        return sum(int(n or 0) for n in pipe.execute())

    def dlq_list(self, queue: str | None, limit: int = 100, offset: int = 0) -> list[JobInfo]:
        """A queue's DLQ is a set ordered by id (every score 0): every queue's is the first
        ``offset + limit`` ids of each, merged."""
        if queue is not None:
            ids = self.client.zrange(self.keys.queue(queue, "dlq"), offset, offset + limit - 1)
            return self._hashes([i.decode() for i in ids])
        pipe = self.client.pipeline(transaction=False)
        for q in self._queues():
            pipe.zrange(self.keys.queue(q, "dlq"), 0, offset + limit - 1)
        merged = sorted(i.decode() for ids in pipe.execute() for i in ids)
        return self._hashes(merged[offset : offset + limit])

    def dlq_size(self, queue: str | None) -> int:
        queues = [queue] if queue is not None else self._queues()
        pipe = self.client.pipeline(transaction=False)
        for q in queues:
            pipe.zcard(self.keys.queue(q, "dlq"))
        return sum(int(n) for n in pipe.execute())

    def _queues(self) -> list[str]:
        """Every queue this backend has held a job of."""
        return sorted(q.decode() for q in self.client.smembers(self.keys.queues))

    def dlq_retry(self, job_id: str, now: datetime | None = None) -> bool:
        retried, _, _ = self.scripts.run("dlq_retry", ["ids", [job_id]], now=now).result
        return bool(retried)

    def dlq_retry_all(self, queue: str, now: datetime | None = None) -> int:
        total, offset = 0, 0
        while True:
            args = ["queue", queue, offset, RETRY_CHUNK]
            reply = self.scripts.run("dlq_retry", args, now=now)
            retried, skipped, seen = (int(n) for n in reply.result)
            total += retried
            offset += skipped  # held by a newer live job: stays in the DLQ, step over it
            if seen < RETRY_CHUNK:
                return total

    def flow_jobs(self, flow_id: str) -> list[JobInfo]:
        ids = sorted(i.decode() for i in self.client.smembers(self.keys.flow(flow_id)))
        return self._hashes(ids)

    def stats(self) -> list[QueueStats]:
        now = self.now()
        return stats_from(self.scripts.run("stats", now=now).result, now, self.alias)

    def prune(
        self,
        *,
        done_before: datetime | None,
        cancelled_before: datetime | None,
        failed_before: datetime | None,
        limit: int = 5000,
    ) -> PruneReport:
        def cut(value: datetime | None) -> Any:
            return False if value is None else str(to_us(value))

        args = [cut(done_before), cut(cancelled_before), cut(failed_before), limit]
        return PruneReport(jobs=int(self.scripts.run("prune", args).result))

    def backlog(self, queues: Sequence[str]) -> Backlog:
        """Ready and due-delayed jobs, leased ones and parked parents count as due, with the
        outbox entries on their way (this Redis's own, and the outbox table's rows bound
        here); delayed ones past Redis ``TIME``, apart. Two round trips, no script."""
        k = self.keys
        now = str(to_us(self.now()))
        pipe = self.client.pipeline(transaction=False)
        for q in queues:
            pipe.zcard(k.queue(q, "ready"))
            pipe.zcount(k.queue(q, "delayed"), "-inf", now)  # due, not promoted yet
            pipe.hget(k.leased, q)
            pipe.scard(k.queue(q, "waiting"))
        pipe.zcard(k.outbox)
        pipe.zcard(k.outbox_leased)
        for q in queues:
            pipe.zcount(k.queue(q, "delayed"), f"({now}", "+inf")
            pipe.zrangebyscore(k.queue(q, "delayed"), f"({now}", "+inf", 0, 1, withscores=True)
        replies = pipe.execute()
        split = 4 * len(queues) + 2
        due = sum(int(n or 0) for n in replies[:split])
        later = replies[split:]
        firsts = [int(first[0][1]) for first in later[1::2] if first]
        rows = OutboxEntry.objects.using(self.audit_db).filter(
            sent_at__isnull=True, backend=self.alias
        )
        return Backlog(
            due=due + rows.count(),
            delayed=sum(int(n) for n in later[0::2]),
            next_due_at=from_us(min(firsts)) if firsts else None,
        )

    # -- parent/child flows ----------------------------------------------------------------
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
                "job_id": child_id,
                "backend": text(c.get("b")) or self.alias,
            }
            for child_id, c in self._manifest(parent_id).items()
        ]
        return state_from_rows(rows)

    def deliver_reports(self, reports: Sequence[Report], now: datetime | None = None) -> int:
        unique = {(r.parent_id, r.child_id): r for r in reversed(reports)}  # first one wins
        if not unique:
            return 0
        blobs = Blobs()
        spec = [report_spec(r, blobs) for r in unique.values()]
        return int(self.scripts.run("deliver_reports", spec, blobs, now).result)

    def report_terminal(self, ids: Sequence[str]) -> int:
        return int(self.scripts.run("report_terminal", list(ids)).result) if ids else 0

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
        return (
            list(self.scripts.run("settle", list(parent_ids), now=now).result) if parent_ids else []
        )

    # -- the outbox, taken by the relay ------------------------------------------------------
    def take_outbox(self, limit: int, after: str = "") -> list[OutboxItem]:
        lease = round(OUTBOX_LEASE_S * 1_000_000)
        taken = self.scripts.run("outbox_take", [limit, lease, int(after or 0)]).result
        return [outbox_item(raw) for raw in taken]

    def outbox_done(self, items: Sequence[OutboxItem], error: str | None = None) -> None:
        spec = ["done" if error is None else "failed", [[i.ref, error or ""] for i in items]]
        self.scripts.run("outbox_done", spec)

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
        return int(self.scripts.run("reland", [parent_id, children], blobs, now).result)

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

    # -- operators' bulk edits, history, charts ---------------------------------------------
    def _bulk(self, op: str, job_ids: Sequence[str], arg: Any, now: datetime | None) -> int:
        total = 0
        for start in range(0, len(job_ids), RETRY_CHUNK):
            chunk = list(job_ids[start : start + RETRY_CHUNK])
            total += int(self.scripts.run("bulk", [op, chunk, arg], now=now).result)
        return total

    def rotate_keys(
        self,
        payload: Callable[[Encoded], Encoded],
        text: Callable[[str | None], str | None],
        *,
        after: str = "",
        limit: int = 500,
    ) -> KeyRotation:
        """One SCAN of the job hashes, re-sealed by ``rotate.lua`` (``rotation.py``); ``after``
        and ``last_id`` are the scan's cursor."""
        return rotation.rotate(self.scripts, payload, text, after=after, limit=limit)

    def delete_jobs(self, job_ids: Sequence[str]) -> int:
        return self._bulk("delete", job_ids, False, None)

    def move_jobs(self, job_ids: Sequence[str], queue: str, now: datetime | None = None) -> int:
        return self._bulk("move", job_ids, queue, now)

    def set_priority(
        self, job_ids: Sequence[str], priority: int, now: datetime | None = None
    ) -> int:
        return self._bulk("priority", job_ids, str(priority), now)

    def dlq_retry_many(self, job_ids: Sequence[str], now: datetime | None = None) -> int:
        total = 0
        for start in range(0, len(job_ids), RETRY_CHUNK):
            chunk = list(job_ids[start : start + RETRY_CHUNK])
            retried, _, _ = self.scripts.run("dlq_retry", ["ids", chunk], now=now).result
            total += int(retried)
        return total

    def attempts(self, job_id: str) -> list[AttemptInfo]:
        entries = self.client.lrange(self.keys.attempts(job_id), 0, -1)
        found = []
        for seq, raw in enumerate(entries, start=1):
            attempt, outcome, started, finished, worker, reason, etype, err, tb = json.loads(raw)
            found.append(
                AttemptInfo(
                    job_id=job_id,
                    seq=seq,
                    attempt=int(attempt),
                    outcome=outcome,
                    started_at=from_us(started),
                    finished_at=from_us(finished),
                    worker=worker or None,
                    reason=reason or None,
                    error_type=etype or None,
                    error=err or None,
                    traceback=tb or None,
                )
            )
        return found

    def record_samples(self, samples: Sequence[Sample], now: datetime | None = None) -> None:
        found = [s for s in merged(samples) if not s.empty]
        if not found:
            return
        zeros = [0] * SLOTS
        spec = [
            [[r.step, r.keep] for r in RESOLUTIONS],
            [
                [
                    *(s.queue, s.name, s.done, s.failed, s.retried, s.cancelled),
                    s.depth if s.depth is not None else False,
                    list(s.wait) or zeros,
                    list(s.run) or zeros,
                ]
                for s in found
            ],
        ]
        self.scripts.run("buckets", spec, now=now)

    def buckets(
        self,
        step: int,
        since: datetime,
        until: datetime,
        *,
        queue: str | None = None,
        name: str | None = None,
    ) -> list[Bucket]:
        """One pipelined HGETALL per bucket of the range (``P:ts:STEP:START``)."""
        first = int(since.timestamp())
        first += -first % step
        starts = list(range(first, int(until.timestamp()), step))
        pipe = self.client.pipeline(transaction=False)
        for start in starts:
            pipe.hgetall(self.keys.bucket(step, start))
        found = []
        for start, fields in zip(starts, pipe.execute(), strict=True):
            at = datetime.fromtimestamp(start, UTC)
            for raw_key, raw in fields.items():
                q, _, n = raw_key.decode().partition("\x1f")
                if queue is not None and q != queue:
                    continue
                if name is not None and n not in ((name, "") if queue is not None else (name,)):
                    continue
                v = [int(x) for x in raw.split(b",")]
                found.append(
                    Bucket(
                        queue=q,
                        name=n,
                        start=at,
                        step=step,
                        done=v[0],
                        failed=v[1],
                        retried=v[2],
                        cancelled=v[3],
                        depth=v[4] if v[4] >= 0 else None,
                        wait=tuple(v[5 : 5 + SLOTS]),
                        run=tuple(v[5 + SLOTS : 5 + 2 * SLOTS]),
                    )
                )
        return found

    def prune_buckets(self, now: datetime | None = None) -> int:
        """Nothing to do: each bucket's hash expires once its window has passed."""
        return 0

    # -- the control plane -----------------------------------------------------------------
    def controls(self, queues: Sequence[str] | None = None) -> dict[str, ControlState]:
        names = (
            list(queues)
            if queues is not None
            else sorted(text(q) or "" for q in self.client.smembers(self.keys.controls))
        )
        pipe = self.client.pipeline(transaction=False)
        for q in names:
            pipe.hgetall(self.keys.queue(q, "ctl"))
        return {
            q: control_from(q, raw) for q, raw in zip(names, pipe.execute(), strict=True) if raw
        }

    def pause(
        self, queue: str, *, reason: str = "", by: str | None = None, now: datetime | None = None
    ) -> ControlState:
        spec = ["pause", queue, reason, by if by is not None else False]
        return self._control(spec, audit.PAUSE, {"reason": reason}, by, now)

    def resume(
        self, queue: str, *, by: str | None = None, now: datetime | None = None
    ) -> ControlState:
        return self._control(["resume", queue], audit.RESUME, {}, by, now)

    def set_limits(
        self,
        queue: str,
        limits: QueueLimits | None,
        *,
        by: str | None = None,
        now: datetime | None = None,
    ) -> ControlState:
        data = {"limits": limits.describe() if limits is not None else None}
        return self._control(["limits", queue, limits_spec(limits)], audit.LIMITS, data, by, now)

    def _control(
        self,
        spec: list[Any],
        action: str,
        data: dict[str, Any],
        by: str | None,
        now: datetime | None,
    ) -> ControlState:
        queue = spec[1]
        reply = self.scripts.run("control", spec, now=now)
        event = audit.Event(action=action, queue=queue, backend=self.alias, user=by, data=data)
        audit.record([event], using=self.audit_db)
        wakeup.control_changed([queue])
        return control_from(queue, reply.result)

    def handler_waits(self, queues: Sequence[str] | None = None) -> list[HandlerWait]:
        rows = self.scripts.run("waits", [list(queues) if queues is not None else False]).result
        return [
            HandlerWait(queue=text(q) or "", name=text(n) or "", count=int(c)) for q, n, c in rows
        ]

    def waiting_names(self) -> dict[tuple[str, str], int]:
        rows = self.scripts.run("names", [NAMES_CAP]).result
        return {(text(q) or "", text(n) or ""): int(c) for q, n, c in rows}

    # -- clock, checks, wake-ups, connections ----------------------------------------------
    def now(self) -> datetime:
        seconds, micros = self.client.time()
        return datetime.fromtimestamp(int(seconds), UTC).replace(microsecond=int(micros))

    def check(self, queues: Sequence[str] = ()) -> Iterable[Any]:
        """W004 unless ``maxmemory-policy`` is ``noeviction``; W005 when ``appendonly no``."""
        return warnings(self.client, self.alias)

    def deployment_warnings(self) -> list[str]:
        """The check's messages as text (the worker's banner and start-up log)."""
        try:
            return [str(w.msg) for w in self.check()]
        except Exception as exc:  # INFO refused (ACL) or unreachable: say so, do not fail
            return [f"redis backend {self.alias!r}: could not read the server's INFO ({exc})"]

    def listener(self, queues: Sequence[str]) -> Any:
        """A pub/sub listener for idle workers; logs the deployment warnings once."""
        if not self._warned:
            self._warned = True
            for message in self.deployment_warnings():
                logger.warning("%s", message)

        return RedisListener(self, queues)

    def on_unavailable(self) -> None:
        self.scripts.on_unavailable()

    def close(self) -> None:
        self.scripts.close()


__all__ = ["RedisBackend"]
