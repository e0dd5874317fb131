"""The ``queue`` facade (SPEC §3): validate, then hand records to a backend.

Every argument is checked and every payload encoded before a backend is called, so a
``QueueError`` from here means nothing was written.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from . import audit, outbox, registry, tracing, validation
from .backends import all_backends, get_backend
from .backends.base import Backend
from .conf import get_settings
from .context import current_job_or_none
from .core import ids
from .core.flows import validate_dag
from .exceptions import ErrorCode, QueueError
from .records import EnqueuedJob, JobInfo, NewJob
from .serializers import encode_many

if TYPE_CHECKING:
    from .worker import Consumer

T = TypeVar("T")


def _call[T](backend: Backend, fn: Callable[[], T], *, idempotent: bool = False) -> T:
    assert backend.resilience is not None
    return backend.resilience.call(fn, idempotent=idempotent)


class Queue:
    """The public API; use the module-level ``queue`` instance."""

    def __init__(self) -> None:
        self._consumers: list[Consumer] = []
        self._lock = threading.Lock()

    # -- enqueue -------------------------------------------------------------------------
    def _new_job(
        self,
        queue_name: str,
        payload: Any,
        *,
        name: str | None = None,
        delay: Any = None,
        run_at: Any = None,
        priority: Any = 0,
        max_attempts: Any = None,
        classification: Any = None,
        trace_id: Any = None,
        dedupe_key: Any = None,
        job_id: str | None = None,
    ) -> NewJob:
        """One validated job (the other arguments as for ``enqueue``)."""
        return self._new_jobs(
            queue_name,
            [payload],
            name=name,
            delay=delay,
            run_at=run_at,
            priority=priority,
            max_attempts=max_attempts,
            classification=classification,
            trace_id=trace_id,
            dedupe_keys=[dedupe_key],
            job_ids=[job_id],
        )[0]

    def _new_jobs(
        self,
        queue_name: str,
        payloads: Sequence[Any],
        *,
        name: str | None,
        delay: Any,
        run_at: Any,
        priority: Any,
        max_attempts: Any,
        classification: Any,
        trace_id: Any,
        dedupe_keys: Sequence[Any],
        job_ids: Sequence[str | None] | None = None,
    ) -> list[NewJob]:
        """Validated jobs of one queue; what they share is checked once, not per payload."""
        settings = get_settings()
        definition = None
        if name is not None:
            if not isinstance(name, str) or not name:
                raise QueueError(ErrorCode.UNKNOWN_JOB, f"job name must be a string, not {name!r}")
            definition = registry.get(name)
            if definition is None:
                raise QueueError(
                    ErrorCode.UNKNOWN_JOB,
                    f"no job is registered as {name!r} (decorate it with @job, and make sure "
                    "its module is imported: jobs.py / tasks.py of an installed app are)",
                )
        if max_attempts is None:
            max_attempts = (definition.max_attempts if definition else None) or (
                settings.default_max_attempts
            )
        ctx = current_job_or_none()
        common: dict[str, Any] = {
            "queue": validation.queue_name(queue_name),
            "name": name or queue_name,
            "priority": validation.priority(priority),
            "delay": validation.delay(delay),
            "run_at": validation.run_at(run_at),
            "max_attempts": validation.positive_int(max_attempts, "max_attempts"),
            "timeout": definition.timeout if definition else None,
            "classification": validation.optional_text(classification, "classification", 100),
        }
        shared_trace = (
            validation.optional_text(trace_id, "trace_id", 64)
            or tracing.current_trace_id()
            or (ctx.trace_id if ctx and ctx.trace_id else None)
        )
        flow = definition.flow if definition is not None else None
        jobs = []
        for i, payload in enumerate(encode_many(payloads)):
            new = NewJob(
                job_id=(job_ids[i] if job_ids is not None else None) or ids.new_id(),
                payload=payload,
                trace_id=shared_trace or os.urandom(16).hex(),  # uuid4().hex's shape, cheaper
                dedupe_key=validation.optional_text(dedupe_keys[i], "dedupe_key", 255),
                **common,
            )
            if flow is not None:
                new = replace(
                    new, flow_phase="fan_out", flow_mode=flow.on_child_failure, flow_id=new.job_id
                )
            jobs.append(new)
        return jobs

    def enqueue(
        self,
        queue_name: str,
        payload: Any = None,
        *,
        name: str | None = None,
        delay: float | None = None,
        run_at: datetime | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        classification: str | None = None,
        trace_id: str | None = None,
        dedupe_key: str | None = None,
        backend: str | None = None,
    ) -> EnqueuedJob:
        """Store one job; inside ``transaction.atomic()`` it commits or rolls back with it."""
        return self.enqueue_many(
            queue_name,
            [payload],
            name=name,
            delay=delay,
            run_at=run_at,
            priority=priority,
            max_attempts=max_attempts,
            classification=classification,
            trace_id=trace_id,
            dedupe_key=dedupe_key,
            backend=backend,
        )[0]

    def enqueue_many(
        self,
        queue_name: str,
        payloads: Iterable[Any],
        *,
        name: str | None = None,
        delay: float | None = None,
        run_at: datetime | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        classification: str | None = None,
        trace_id: str | None = None,
        dedupe_key: str | None = None,
        dedupe_keys: Sequence[str | None] | None = None,
        backend: str | None = None,
    ) -> list[EnqueuedJob]:
        """Store many jobs of one queue in one statement batch (all or none)."""
        if isinstance(payloads, str | bytes | Mapping) or not isinstance(payloads, Iterable):
            raise QueueError(ErrorCode.BAD_PAYLOAD, "enqueue_many takes an iterable of payloads")
        items = list(payloads)
        if dedupe_keys is not None and len(dedupe_keys) != len(items):
            raise QueueError(ErrorCode.BAD_ARGUMENT, "dedupe_keys must match payloads in length")
        target = get_backend(backend)
        if not items:
            return []
        # The span is current while the jobs are built: they carry its trace context.
        with tracing.enqueue_span(queue_name, target.alias) as span:
            jobs = self._new_jobs(
                queue_name,
                items,
                name=name,
                delay=delay,
                run_at=run_at,
                priority=priority,
                max_attempts=max_attempts,
                classification=classification,
                trace_id=trace_id,
                dedupe_keys=dedupe_keys if dedupe_keys is not None else [dedupe_key] * len(items),
            )
            flows = [  # a @flow's root: audited as a flow enqueue, with the insert
                audit.Event(
                    action=audit.FLOW_ENQUEUE,
                    job_id=j.job_id,
                    queue=j.queue,
                    backend=target.alias,
                    data={"flow_id": j.flow_id, "name": j.name},
                )
                for j in jobs
                if j.flow_phase
            ]
            enqueued = _store(target, jobs, flows)
            tracing.enqueued(span, enqueued)
            return enqueued

    def enqueue_flow(
        self, queue_name: str, children: Sequence[Mapping[str, Any]], *, backend: str | None = None
    ) -> dict[str, Any]:
        """Register a DAG in one transaction: dependants stay blocked until deps are done."""
        validation.queue_name(queue_name)
        validate_dag(children)
        target = get_backend(backend)
        flow_id = ids.new_id()
        by_name = {c["name"]: ids.new_id() for c in children}
        with tracing.enqueue_span(queue_name, target.alias) as span:
            jobs = []
            for c in children:
                job = self._new_job(
                    queue_name,
                    c.get("payload"),
                    name=c.get("job"),
                    delay=c.get("delay"),
                    run_at=None,
                    priority=c.get("priority", 0),
                    max_attempts=c.get("max_attempts"),
                    classification=c.get("classification"),
                    trace_id=c.get("trace_id") or tracing.current_trace_id() or flow_id,
                    dedupe_key=c.get("dedupe_key"),
                    job_id=by_name[c["name"]],
                )
                depends = tuple(by_name[d] for d in c.get("depends_on", ()))
                node = {
                    "name": c.get("job") or c["name"],
                    "flow_id": flow_id,
                    "flow_key": c["name"],
                    "blocked": bool(depends),
                    "depends_on": depends,
                }
                jobs.append(NewJob(**{**_fields(job), **node}))
            event = audit.Event(
                action=audit.FLOW_ENQUEUE,
                queue=queue_name,
                backend=target.alias,
                data={"flow_id": flow_id, "jobs": len(jobs)},
            )
            tracing.enqueued(span, _store(target, jobs, [event]))
        return {
            "flow_id": flow_id,
            "jobs": [{"name": c["name"], "job_id": by_name[c["name"]]} for c in children],
        }

    # -- consume -------------------------------------------------------------------------
    def consume(
        self,
        queue_name: str | Sequence[str],
        handler: Callable[..., Any] | None = None,
        *,
        concurrency: int = 1,
        lease: float | None = None,
        poll_interval: float = 1.0,
        fast_poll: float = 0.05,
        rate_limit: tuple[int, float] | None = None,
        backend: str | None = None,
        burst: bool = False,
    ) -> Consumer:
        """Start consuming in background threads. ``handler(job, ctx)``; None dispatches by
        job name to ``@job`` handlers."""
        from .worker import Consumer, WorkerOptions

        if isinstance(queue_name, str):
            queues = [queue_name]
        elif isinstance(queue_name, Sequence | set | frozenset):
            queues = list(queue_name)
        else:
            raise QueueError(
                ErrorCode.MISSING_QUEUE, f"consume needs a queue name or a list, not {queue_name!r}"
            )
        if not queues:
            raise QueueError(ErrorCode.MISSING_QUEUE, "consume needs at least one queue")
        for q in queues:
            validation.queue_name(q)
        if handler is not None and not callable(handler):
            raise QueueError(ErrorCode.INVALID_HANDLER, f"handler {handler!r} is not callable")
        options = WorkerOptions(
            queues=tuple(queues),
            concurrency=validation.concurrency(concurrency),
            lease=validation.seconds(lease, "lease", default=get_settings().default_lease),
            poll_interval=validation.positive_number(poll_interval, "poll_interval"),
            fast_poll=validation.positive_number(fast_poll, "fast_poll"),
            rate_limit=validation.rate_limit(rate_limit),
            burst=burst,
        )
        consumer = Consumer(get_backend(backend), options, handler=handler)
        with self._lock:
            self._consumers = [c for c in self._consumers if c.alive] + [consumer]
        consumer.start()
        return consumer

    def shutdown(self, timeout: float = 30) -> None:
        """Stop every consumer started in this process; wait up to ``timeout`` for them."""
        with self._lock:
            consumers, self._consumers = self._consumers, []
        for c in consumers:
            c.cancel(grace=timeout)
        for c in consumers:
            c.join(timeout)

    # -- inspect and operate -------------------------------------------------------------
    def _find(self, job_id: str, backend: str | None) -> tuple[Backend, JobInfo | None]:
        if backend is not None:
            b = get_backend(backend)
            return b, _call(b, lambda: b.get(job_id), idempotent=True)
        candidates = [get_backend(None)] + [
            b for b in all_backends() if b.alias != get_settings().default_backend
        ]
        for b in candidates:
            info = _call(b, lambda b=b: b.get(job_id), idempotent=True)  # type: ignore[misc]
            if info is not None:
                return b, info
        return candidates[0], None

    def get_job(self, job_id: str, backend: str | None = None) -> JobInfo | None:
        validation.identifier(job_id)
        return self._find(job_id, backend)[1]

    def size(self, queue_name: str, backend: str | None = None) -> int:
        """Pending + inflight jobs."""
        b = get_backend(backend)
        q = validation.queue_name(queue_name)
        return _call(b, lambda: b.size(q), idempotent=True)

    def purge(self, queue_name: str, backend: str | None = None) -> int:
        """Delete the queue's waiting jobs (pending, blocked); answer the count."""
        b = get_backend(backend)
        q = validation.queue_name(queue_name)
        return _call(b, lambda: b.purge(q))

    def cancel(self, job_id: str, backend: str | None = None) -> bool:
        """Waiting jobs are cancelled at once, running ones interrupted; terminal: False."""
        validation.identifier(job_id)
        b, info = self._find(job_id, backend)
        if info is None:
            return False
        result = _call(b, lambda: b.cancel(job_id))
        return result.cancelled or result.requested

    def dlq_list(
        self, queue_name: str, limit: int = 100, offset: int = 0, backend: str | None = None
    ) -> list[JobInfo]:
        b = get_backend(backend)
        self._require_dlq(b)
        q = validation.queue_name(queue_name)
        limit = validation.positive_int(limit, "limit")
        offset = validation.non_negative_int(offset, "offset")
        return _call(b, lambda: b.dlq_list(q, limit, offset), idempotent=True)

    def dlq_size(self, queue_name: str, backend: str | None = None) -> int:
        b = get_backend(backend)
        q = validation.queue_name(queue_name)
        return _call(b, lambda: b.dlq_size(q), idempotent=True)

    def dlq_retry(self, job_id: str, backend: str | None = None) -> bool:
        """A DLQ job back to pending with a fresh attempt budget."""
        validation.identifier(job_id)
        b, info = self._find(job_id, backend)
        if info is None:
            return False
        return _call(b, lambda: b.dlq_retry(job_id))

    def dlq_retry_all(self, queue_name: str, backend: str | None = None) -> int:
        b = get_backend(backend)
        q = validation.queue_name(queue_name)
        return _call(b, lambda: b.dlq_retry_all(q))

    @staticmethod
    def _require_dlq(b: Backend) -> None:
        if not b.supports_dlq_listing:
            raise QueueError(ErrorCode.DLQ_UNSUPPORTED, f"backend {b.alias!r} cannot list its DLQ")

    def cancel_flow(self, flow_id: str, backend: str | None = None) -> int:
        validation.identifier(flow_id, "flow_id")
        total = 0
        for b in [get_backend(backend)] if backend else all_backends():
            total += _call(b, lambda b=b: b.cancel_flow(flow_id))  # type: ignore[misc]
        return total

    def flow_jobs(self, flow_id: str, backend: str | None = None) -> list[JobInfo]:
        validation.identifier(flow_id, "flow_id")
        found: list[JobInfo] = []
        for b in [get_backend(backend)] if backend else all_backends():
            found += _call(b, lambda b=b: b.flow_jobs(flow_id), idempotent=True)  # type: ignore[misc]
        return found

    def list_backends(self) -> list[dict[str, str]]:
        return [
            {
                "name": b.alias,
                "protocol": b.protocol,
                "breaker_state": b.resilience.breaker.state if b.resilience else "closed",
            }
            for b in all_backends()
        ]


def _store(target: Backend, jobs: list[NewJob], events: list[audit.Event]) -> list[EnqueuedJob]:
    """Hand validated jobs to their backend, transactionally on every backend (SPEC §3).

    A local backend's enqueue is a row of the caller's transaction by itself. For an engine
    outside the database (redis, sqs), an enqueue inside ``transaction.atomic()`` on the
    backend's Django database is written to the outbox in that transaction and relayed after
    commit (nothing is sent on rollback, nothing lost between COMMIT and the send); the job id
    is fixed here, so a relay that sends twice creates one job. A dedupe key is then resolved
    by the engine when the relay delivers: the answer is the new id, not yet the holder's.
    Outside a transaction the jobs go straight to the engine.
    """
    from django.db import connections

    if not target.transactional_enqueue:
        db = outbox.database_of(target)
        if connections[db].in_atomic_block:
            target.check_jobs(jobs)  # not through the breaker: the outbox is for outages
            entries = [("enqueue", target.alias, j.job_id, outbox.job_to_body(j)) for j in jobs]
            outbox.write_many(entries, using=db)
            audit.record(events, using=db)
            return [
                EnqueuedJob(job_id=j.job_id, queue_name=j.queue, backend=target.alias) for j in jobs
            ]
    return _call(target, lambda: target.enqueue_many(jobs, events=events))


def _fields(job: NewJob) -> dict[str, Any]:
    return {f: getattr(job, f) for f in job.__dataclass_fields__}


queue = Queue()
