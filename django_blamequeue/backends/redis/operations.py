"""Operations and inspection on the redis backend: cancel, purge, the DLQ, look-ups, stats,
retention. Reads that need no atomicity are pipelines; every write is a script."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django_blamequeue import audit
from django_blamequeue.backends.redis.base import RedisBase
from django_blamequeue.backends.redis.codec import info_from
from django_blamequeue.backends.redis.keys import from_us, to_us
from django_blamequeue.core.records import Backlog, CancelResult, JobInfo, PruneReport, QueueStats
from django_blamequeue.core.states import State
from django_blamequeue.models import OutboxEntry

PURGE_CHUNK = 5000
RETRY_CHUNK = 1000


class Operations(RedisBase):
    def cancel(self, job_id: str, now: datetime | None = None) -> CancelResult:
        found, cancelled, requested, state = self._run("cancel", [job_id], now=now).result
        if not int(found):
            return CancelResult(found=False)
        return CancelResult(
            found=True,
            cancelled=bool(int(cancelled)),
            requested=bool(int(requested)),
            state=State(state.decode()),
        )

    def cancel_flow(self, flow_id: str, now: datetime | None = None) -> int:
        return int(self._run("cancel_flow", [flow_id], now=now).result)

    def purge(self, queue: str) -> int:
        """Waiting jobs are deleted ``PURGE_CHUNK`` per script call (each call atomic)."""
        total = 0
        while True:
            n = int(self._run("purge", [queue, PURGE_CHUNK]).result)
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

    def dlq_list(self, queue: str, limit: int = 100, offset: int = 0) -> list[JobInfo]:
        ids = self.client.zrange(self.keys.queue(queue, "dlq"), offset, offset + limit - 1)
        return self._hashes([i.decode() for i in ids])

    def dlq_size(self, queue: str) -> int:
        return int(self.client.zcard(self.keys.queue(queue, "dlq")))

    def dlq_retry(self, job_id: str, now: datetime | None = None) -> bool:
        retried, _, _ = self._run("dlq_retry", ["ids", [job_id]], now=now).result
        return bool(retried)

    def dlq_retry_all(self, queue: str, now: datetime | None = None) -> int:
        total, offset = 0, 0
        while True:
            args = ["queue", queue, offset, RETRY_CHUNK]
            reply = self._run("dlq_retry", args, now=now)
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
        rows = self._run("stats", now=now).result
        out = []
        states = [s.value for s in State]
        for row in sorted(rows, key=lambda r: r[0]):
            queue, *numbers = row
            pending, blocked, inflight, waiting, done, failed, cancelled = numbers[:7]
            counts = dict.fromkeys(states, 0)
            counts.update(
                pending=pending,
                blocked=blocked,
                inflight=inflight,
                waiting_children=waiting,
                done=done,
                failed=failed,
                cancelled=cancelled,
            )
            if not any(counts.values()):
                continue
            oldest = from_us(numbers[7])
            next_due = from_us(numbers[11])
            out.append(
                QueueStats(
                    backend=self.alias,
                    queue=queue.decode(),
                    counts=counts,
                    oldest_pending_age=max(0.0, (now - oldest).total_seconds()) if oldest else None,
                    done_last_hour=numbers[8],
                    failed_last_hour=numbers[9],
                    delayed=numbers[10],
                    next_delayed_in=(next_due - now).total_seconds() if next_due else None,
                )
            )
        return out

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
        return PruneReport(jobs=int(self._run("prune", args).result))

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
