"""The ``queue`` facade (docs/concepts.md): validate, then hand records to a backend.

Every argument is checked and every payload encoded before a backend is called, so a
``QueueError`` from here means nothing was written.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from asgiref.sync import sync_to_async

from django_blamequeue import audit
from django_blamequeue.backends import all_backends, get_backend
from django_blamequeue.backends.base import Backend
from django_blamequeue.conf import get_settings
from django_blamequeue.core import ids, validation
from django_blamequeue.core.controls import ControlState, QueueControl, QueueLimits, WorkerInfo
from django_blamequeue.core.dag import DAG_OPTIONS, validate_dag
from django_blamequeue.core.records import AttemptInfo, EnqueuedJob, JobInfo
from django_blamequeue.core.unique import Unique
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs import enqueueing, registry, workflow_ops
from django_blamequeue.jobs.origin import About, about_key
from django_blamequeue.jobs.workflow_ops import StepView
from django_blamequeue.observability import tracing
from django_blamequeue.worker import fleet
from django_blamequeue.worker.consumer import Consumer, WorkerOptions

T = TypeVar("T")
logger = logging.getLogger("django_blamequeue.worker")


def _call[T](backend: Backend, fn: Callable[[], T], *, idempotent: bool = False) -> T:
    assert backend.resilience is not None
    return backend.resilience.call(fn, idempotent=idempotent)


MAX_REASON = 1000


def _user(user: object) -> str | None:
    return validation.optional_text(user, "user", 150)


def view(backend: Backend, queue: str, state: ControlState | None) -> QueueControl:
    """A queue's control state as the API answers it: the limits in force and their source."""
    state = state or ControlState(queue=queue)
    defaults = get_settings().queues.get(queue)
    return QueueControl(
        backend=backend.alias,
        queue=queue,
        paused=state.paused,
        reason=state.reason,
        paused_at=state.paused_at,
        paused_by=state.paused_by,
        limits=state.in_force(defaults),
        source=state.source(defaults),
        version=state.version,
    )


class Queue:
    """The public API; use the module-level ``queue`` instance."""

    def __init__(self) -> None:
        self._consumers: list[Consumer] = []
        self._lock = threading.Lock()

    # -- enqueue -------------------------------------------------------------------------
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
        dedupe_key: str | About | None = None,
        backend: str | None = None,
        concurrency_key: str | None = None,
        about: Any = None,
        unique: Unique | bool | Mapping[str, Any] | None = None,
        expires: float | timedelta | datetime | None = None,
    ) -> EnqueuedJob:
        """Store one job; inside ``transaction.atomic()`` it commits or rolls back with it.
        ``concurrency_key``: the key of the queue's per-key limits (docs/control.md);
        ``about``: the model instance the job is about (``JobInfo.about``, ``jobs_about``);
        ``unique``: at most one job per key (docs/unique.md).
        ``expires``: seconds (or a datetime) after which a run not started yet is cancelled
        (reason ``expired``; docs/lifecycle.md#expiry)."""
        given = {  # the call's options, by JobOptions' names (merged in enqueueing)
            "queue": queue_name,
            "backend": backend,
            "priority": priority,
            "max_attempts": max_attempts,
            "classification": classification,
            "trace_id": trace_id,
            "delay": delay,
            "run_at": run_at,
            "dedupe_key": dedupe_key,
            "concurrency_key": concurrency_key,
            "about": about,
            "unique": unique,
            "expires": expires,
        }
        return enqueueing.enqueue(payload, given, definition=_definition(name), name=name)

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
        dedupe_key: str | About | None = None,
        dedupe_keys: Sequence[str | About | None] | None = None,
        backend: str | None = None,
        concurrency_key: str | None = None,
        concurrency_keys: Sequence[str | None] | None = None,
        about: Any = None,
        abouts: Sequence[Any] | None = None,
        unique: Unique | bool | Mapping[str, Any] | None = None,
        expires: float | timedelta | datetime | None = None,
    ) -> list[EnqueuedJob]:
        """Store many jobs of one queue in one statement batch (all or none). ``about``: one
        model instance every job is about; ``abouts``: one per payload; ``concurrency_keys``
        likewise one key per payload."""
        given = {  # the call's options, by JobOptions' names (merged in enqueueing)
            "queue": queue_name,
            "backend": backend,
            "priority": priority,
            "max_attempts": max_attempts,
            "classification": classification,
            "trace_id": trace_id,
            "delay": delay,
            "run_at": run_at,
            "dedupe_key": dedupe_key,
            "concurrency_key": concurrency_key,
            "about": about,
            "unique": unique,
            "expires": expires,
        }
        return enqueueing.enqueue_many(
            payloads,
            given,
            definition=_definition(name),
            name=name,
            dedupe_keys=dedupe_keys,
            concurrency_keys=concurrency_keys,
            abouts=abouts,
        )

    async def aenqueue(self, queue_name: str, payload: Any = None, **options: Any) -> EnqueuedJob:
        """``enqueue`` for async code (an async view), with the same arguments. It runs
        through ``sync_to_async`` on the thread of the caller's other database work, so it
        joins a transaction opened there as ``enqueue`` does."""
        return await sync_to_async(self.enqueue)(queue_name, payload, **options)

    async def aenqueue_many(
        self, queue_name: str, payloads: Iterable[Any], **options: Any
    ) -> list[EnqueuedJob]:
        """``enqueue_many`` for async code."""
        return await sync_to_async(self.enqueue_many)(queue_name, list(payloads), **options)

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
                given = {k: c[k] for k in DAG_OPTIONS if k in c}  # the rest: the job's own
                given.setdefault("priority", 0)
                given["trace_id"] = c.get("trace_id") or tracing.current_trace_id() or flow_id
                job = enqueueing.new_job(
                    queue_name,
                    c.get("payload"),
                    definition=_definition(c.get("job")),
                    name=c.get("job"),
                    job_id=by_name[c["name"]],
                    cause={"flow": flow_id},
                    **given,
                )
                depends = tuple(by_name[d] for d in c.get("depends_on", ()))
                node = {
                    "name": c.get("job") or c["name"],
                    "flow_id": flow_id,
                    "flow_key": c["name"],
                    "blocked": bool(depends),
                    "depends_on": depends,
                }
                jobs.append(replace(job, **node))
            event = audit.Event(
                action=audit.FLOW_ENQUEUE,
                queue=queue_name,
                backend=target.alias,
                data={"flow_id": flow_id, "jobs": len(jobs)},
            )
            tracing.enqueued(span, enqueueing.store(target, jobs, [event]))
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
        wait_delayed: bool = False,
        max_jobs: int | None = None,
    ) -> Consumer:
        """Start consuming in background threads. ``handler(job, ctx)``; None dispatches by
        job name to ``@job`` handlers. ``burst``: stop once nothing is due (delayed jobs are
        left, ``consumer.left`` says how many; ``wait_delayed`` waits for them too).
        ``max_jobs``: claim no more than that many jobs in all (``runworker`` recycling)."""
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
            wait_delayed=wait_delayed,
            max_jobs=None if max_jobs is None else validation.positive_int(max_jobs, "max_jobs"),
        )
        target = get_backend(backend)
        consumer = Consumer(target, options, handler=handler)
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

    def purge(
        self,
        queue_name: str,
        backend: str | None = None,
        *,
        created_before: datetime | None = None,
    ) -> int:
        """Delete the queue's waiting jobs (pending, blocked); answer the count. With
        ``created_before`` (say, the backend's ``now()`` when the operator confirmed), only
        jobs created at or before it: jobs that arrived since are kept."""
        b = get_backend(backend)
        q = validation.queue_name(queue_name)
        bound = validation.created_before(created_before)
        return _call(b, lambda: b.purge(q, bound))

    def cancel(self, job_id: str, backend: str | None = None) -> bool:
        """Waiting jobs are cancelled at once, running ones interrupted; terminal: False."""
        validation.identifier(job_id)
        b, info = self._find(job_id, backend)
        if info is None:
            return False
        result = _call(b, lambda: b.cancel(job_id))
        return result.cancelled or result.requested

    def dlq_list(
        self,
        queue_name: str | None = None,
        limit: int = 100,
        offset: int = 0,
        backend: str | None = None,
    ) -> list[JobInfo]:
        """A queue's dead letters, oldest first (by id). Without ``queue_name``, every
        queue's: of ``backend``, or of every backend that lists its DLQ, merged by id."""
        limit = validation.positive_int(limit, "limit")
        offset = validation.non_negative_int(offset, "offset")
        q = None if queue_name is None else validation.queue_name(queue_name)
        if q is not None or backend is not None:
            b = get_backend(backend)
            self._require_dlq(b)
            return _call(b, lambda: b.dlq_list(q, limit, offset), idempotent=True)
        found: list[JobInfo] = []
        for b in all_backends():
            if b.supports_dlq_listing:
                found += _call(b, lambda b=b: b.dlq_list(None, offset + limit), idempotent=True)  # type: ignore[misc]
        found.sort(key=lambda info: info.job_id)
        return found[offset : offset + limit]

    def dlq_size(self, queue_name: str | None = None, backend: str | None = None) -> int:
        """How many dead letters a queue holds; without ``queue_name``, every queue (of
        ``backend``, or of every backend)."""
        q = None if queue_name is None else validation.queue_name(queue_name)
        if q is not None or backend is not None:
            b = get_backend(backend)
            return _call(b, lambda: b.dlq_size(q), idempotent=True)
        return sum(
            _call(b, lambda b=b: b.dlq_size(None), idempotent=True)  # type: ignore[misc]
            for b in all_backends()
        )

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

    def dlq_retry_many(self, job_ids: Sequence[str], *, backend: str | None = None) -> int:
        """The failed jobs among ``job_ids`` back to pending; answers how many."""
        b, found = get_backend(backend), _ids(job_ids)
        return _call(b, lambda: b.dlq_retry_many(found)) if found else 0

    def delete_jobs(self, job_ids: Sequence[str], *, backend: str | None = None) -> int:
        """Delete these jobs unless running (inflight, waiting for children), with their
        flow rows and history; answers how many. Each deletion is audited."""
        b, found = get_backend(backend), _ids(job_ids)
        return _call(b, lambda: b.delete_jobs(found)) if found else 0

    def move_jobs(
        self, job_ids: Sequence[str], queue_name: str, *, backend: str | None = None
    ) -> int:
        """Move the pending, blocked and failed ones among these jobs to ``queue_name``
        (a waiting job whose dedupe key a live job holds there stays); answers how many."""
        b, found = get_backend(backend), _ids(job_ids)
        q = validation.queue_name(queue_name)
        return _call(b, lambda: b.move_jobs(found, q)) if found else 0

    def set_priority(
        self, job_ids: Sequence[str], priority: int, *, backend: str | None = None
    ) -> int:
        """Give the pending, blocked and failed ones among these jobs ``priority``; answers
        how many changed."""
        b, found = get_backend(backend), _ids(job_ids)
        p = validation.priority(priority)
        return _call(b, lambda: b.set_priority(found, p)) if found else 0

    def attempts(self, job_id: str, backend: str | None = None) -> list[AttemptInfo]:
        """The job's attempt history, oldest first (``ATTEMPT_HISTORY`` says which are
        kept); [] for an unknown job."""
        validation.identifier(job_id)
        b, info = self._find(job_id, backend)
        if info is None:
            return []
        return _call(b, lambda: b.attempts(job_id), idempotent=True)

    @staticmethod
    def _require_dlq(b: Backend) -> None:
        if not b.supports_dlq_listing:
            raise QueueError(ErrorCode.DLQ_UNSUPPORTED, f"backend {b.alias!r} cannot list its DLQ")

    # -- durable workflows (docs/workflows.md) -------------------------------------------
    def send_event(
        self,
        name: str,
        *,
        key: str = "",
        payload: Any = None,
        backend: str | None = None,
        keep: float | None = None,
        user: str | None = None,
        encrypted: bool | None = None,
    ) -> int:
        """Deliver event ``name``/``key`` to the workflow that waits for it
        (``ctx.wait_for_event``), or keep it ``keep`` seconds (``RETENTION["EVENTS"]``) for
        the first that will. Inside ``transaction.atomic()`` it is sent only if the
        transaction commits. ``backend``: whose database keeps it (the default backend's).
        ``encrypted``: store the payload sealed (default: when ``ENCRYPT`` encrypts any
        queue; docs/encryption.md)."""
        return workflow_ops.send_event(
            name, key, payload, backend=backend, keep=keep, user=user, encrypted=encrypted
        )

    def rerun_workflow(
        self,
        job_id: str,
        from_step: int,
        *,
        backend: str | None = None,
        user: str | None = None,
    ) -> EnqueuedJob:
        """Run an ended durable workflow again from step ``from_step`` (1-based): a new job
        that keeps the steps before it and re-runs the rest; the original is left as it
        was. Audited with ``user``."""
        validation.identifier(job_id)
        return workflow_ops.rerun(job_id, from_step, backend=backend, user=user)

    def workflow_steps(self, job_id: str, backend: str | None = None) -> list[StepView]:
        """The recorded steps of a durable job, in order (its timeline)."""
        validation.identifier(job_id)
        return workflow_ops.steps(job_id, backend)

    def cancel_flow(self, flow_id: str, backend: str | None = None) -> int:
        validation.identifier(flow_id, "flow_id")
        total = 0
        for b in [get_backend(backend)] if backend else all_backends():
            total += _call(b, lambda b=b: b.cancel_flow(flow_id))  # type: ignore[misc]
        return total

    def jobs_about(self, obj: Any, *, limit: int = 50, backend: str | None = None) -> list[JobInfo]:
        """The jobs about ``obj`` (a model instance, or its ``"app_label.model_name:pk"``),
        newest first, at most ``limit``; from every backend unless ``backend`` is named."""
        key = about_key(obj)
        limit = validation.positive_int(limit, "limit")
        found: list[JobInfo] = []
        for b in [get_backend(backend)] if backend else all_backends():
            found += _call(b, lambda b=b: b.jobs_about(key, limit), idempotent=True)  # type: ignore[misc]
        found.sort(key=lambda info: info.job_id, reverse=True)  # ids sort by creation time
        return found[:limit]

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

    # -- the control plane (docs/control.md): pause and resume, limits, the worker registry.
    # Every argument is checked before a backend is called: a ``QueueError`` (``BAD_LIMIT``
    # for a limit) means nothing was written.
    def pause(
        self,
        queue_name: str,
        *,
        backend: str | None = None,
        reason: str = "",
        user: str | None = None,
    ) -> None:
        """No worker claims from ``queue_name`` once this returns (in-flight jobs finish);
        listening workers hear it at once, polling ones within a poll interval."""
        b = get_backend(backend)
        q = validation.queue_name(queue_name)
        why = validation.optional_text(reason or None, "reason", MAX_REASON) or ""
        by = _user(user)
        _call(b, lambda: b.pause(q, reason=why, by=by))

    def resume(
        self, queue_name: str, *, backend: str | None = None, user: str | None = None
    ) -> None:
        b = get_backend(backend)
        q = validation.queue_name(queue_name)
        by = _user(user)
        _call(b, lambda: b.resume(q, by=by))

    def is_paused(self, queue_name: str, *, backend: str | None = None) -> bool:
        return self.control(queue_name, backend=backend).paused

    def set_limits(
        self,
        queue_name: str,
        *,
        concurrency: int | None = None,
        key_concurrency: int | None = None,
        rate_limit: tuple[int, float] | None = None,
        key_rate_limit: tuple[int, float] | None = None,
        key_weights: Mapping[str, int] | None = None,
        backend: str | None = None,
        user: str | None = None,
    ) -> QueueLimits:
        """The queue's live limits, across every worker (``None``: no such limit). They
        replace its ``BLAMEQUEUE["QUEUES"]`` defaults as a whole until ``clear_limits``.
        ``key_weights``: glob → weight, the keys' shares when they compete
        (docs/weighted-shares.md)."""
        b = get_backend(backend)
        q = validation.queue_name(queue_name)
        limits = validation.limits(
            concurrency=concurrency,
            key_concurrency=key_concurrency,
            rate_limit=rate_limit,
            key_rate_limit=key_rate_limit,
            key_weights=key_weights,
        )
        by = _user(user)
        _call(b, lambda: b.set_limits(q, limits, by=by))
        return limits

    def clear_limits(
        self, queue_name: str, *, backend: str | None = None, user: str | None = None
    ) -> QueueLimits:
        """Drop the live limits: the queue's settings defaults apply again (answered)."""
        b = get_backend(backend)
        q = validation.queue_name(queue_name)
        by = _user(user)
        _call(b, lambda: b.set_limits(q, None, by=by))
        return get_settings().queues.get(q) or QueueLimits()

    def get_limits(self, queue_name: str, *, backend: str | None = None) -> QueueLimits:
        """The limits in force: the live ones, else the settings' defaults."""
        return self.control(queue_name, backend=backend).limits

    def control(self, queue_name: str, *, backend: str | None = None) -> QueueControl:
        b = get_backend(backend)
        q = validation.queue_name(queue_name)
        states = _call(b, lambda: b.controls([q]), idempotent=True)
        return view(b, q, states.get(q))

    def controls(self, *, backend: str | None = None) -> list[QueueControl]:
        """Every queue of the backend(s) that is paused or limited (live or by settings)."""
        found: list[QueueControl] = []
        for b in [get_backend(backend)] if backend else all_backends():
            states = _call(b, lambda b=b: b.controls(), idempotent=True)  # type: ignore[misc]
            names = sorted(set(states) | set(get_settings().queues))
            for q in names:
                v = view(b, q, states.get(q))
                if v.paused or not v.limits.empty:
                    found.append(v)
        return found

    def workers(self, *, backend: str | None = None) -> list[WorkerInfo]:
        """The worker registry: live workers first (running, stopping), then stopped and gone
        ones until they are pruned."""
        found: list[WorkerInfo] = []
        for b in [get_backend(backend)] if backend else all_backends():
            found += fleet.workers(b)
        return found


#: The most job ids one bulk call takes (the console sends 500 at a time).
MAX_IDS = 10_000


def _ids(job_ids: object) -> list[str]:
    """Job ids of a bulk call: a list or tuple of ids, at most ``MAX_IDS``; duplicates once."""
    if isinstance(job_ids, str) or not isinstance(job_ids, list | tuple):
        raise QueueError(ErrorCode.BAD_ARGUMENT, f"job_ids must be a list of ids, not {job_ids!r}")
    if len(job_ids) > MAX_IDS:
        raise QueueError(
            ErrorCode.BAD_ARGUMENT, f"at most {MAX_IDS:,} job ids a call, not {len(job_ids):,}"
        )
    return sorted({validation.identifier(j) for j in job_ids})


def _definition(name: object) -> registry.JobDefinition | None:
    """The registered job ``name`` names (None: the job is named after its queue)."""
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise QueueError(ErrorCode.UNKNOWN_JOB, f"job name must be a string, not {name!r}")
    definition = registry.get(name)
    if definition is None:
        raise QueueError(
            ErrorCode.UNKNOWN_JOB,
            f"no job is registered as {name!r} (decorate it with @job, and make sure "
            "its module is imported: jobs.py / tasks.py of an installed app are)",
        )
    return definition


queue = Queue()
