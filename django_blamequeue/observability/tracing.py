"""OpenTelemetry tracing (the optional ``otel`` extra): one span per enqueue, one per run.

Call ``enable()`` once per process (e.g. in your ``AppConfig.ready``), after configuring a
tracer provider. Then:

- ``enqueue {queue}`` (kind PRODUCER) wraps every ``enqueue`` / ``enqueue_many`` /
  ``enqueue_flow`` call, as a child of whatever span is current;
- the job carries that span's context as its ``trace_id``, written ``<trace-id>-<span-id>``
  (32 and 16 hex digits, the two ids of a W3C ``traceparent``). An explicit ``trace_id`` is
  kept as given;
- ``run {job name}`` (kind CONSUMER) wraps each attempt in the worker, as a child of the
  enqueue span: the same trace, however many processes and retries lie between. A job whose
  ``trace_id`` is not such a pair (enqueued untraced) runs in a new trace, its ``trace_id``
  kept as the ``blamequeue.trace_id`` attribute.

Attributes: ``messaging.system`` = ``blamequeue``, ``messaging.destination.name`` (the queue),
``messaging.message.id`` and ``blamequeue.job.id``, ``blamequeue.job.name``,
``blamequeue.job.attempt``, ``blamequeue.backend`` and ``blamequeue.outcome`` (enqueue:
``enqueued`` / ``deduplicated``; run: ``succeeded``, ``failed``, ``timeout``, ``cancelled``,
``released``, ``bad_job``, ``fanned_out``, ``lock_lost``, ``shutdown``).

Disabled (the default), every hook here is a flag test: nothing is imported.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

from django_blamequeue.core import lifecycle
from django_blamequeue.exceptions import JobInterrupted

if TYPE_CHECKING:
    from django_blamequeue.core.lifecycle import Outcome
    from django_blamequeue.core.records import EnqueuedJob
    from django_blamequeue.worker.execution import Handler, Run

__all__ = ["current_trace_id", "disable", "enable", "enabled"]

enabled = False
_tracer: Any = None
_NULL: AbstractContextManager[Any] = contextlib.nullcontext(None)
_PAIR = re.compile(r"([0-9a-f]{32})-([0-9a-f]{16})")

OUTCOME = "blamequeue.outcome"


def enable(tracer_provider: Any = None) -> None:
    """Trace enqueues and runs in this process (with the global provider unless given one)."""
    global enabled, _tracer
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise ImproperlyConfigured(
            "tracing needs OpenTelemetry: pip install 'django-blamequeue[otel]'"
        ) from exc
    _tracer = trace.get_tracer("django_blamequeue", _version(), tracer_provider=tracer_provider)
    enabled = True


def disable() -> None:
    global enabled, _tracer
    enabled, _tracer = False, None


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("django-blamequeue")
    except PackageNotFoundError:
        return "dev"


def current_trace_id() -> str | None:
    """``<trace-id>-<span-id>`` of the current span, for a job enqueued now; None untraced."""
    if not enabled:
        return None
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}-{ctx.span_id:016x}"


def enqueue_span(queue: str, backend: str) -> AbstractContextManager[Any]:
    """The current span while jobs are built and stored; ``None`` when disabled."""
    if not enabled:
        return _NULL
    from opentelemetry.trace import SpanKind

    return _tracer.start_as_current_span(  # type: ignore[no-any-return]
        f"enqueue {queue}",
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "blamequeue",
            "messaging.operation.type": "create",
            "messaging.destination.name": queue,
            "blamequeue.queue": queue,
            "blamequeue.backend": backend,
        },
    )


def enqueued(span: Any, jobs: Sequence[EnqueuedJob]) -> None:
    if span is None or not jobs:
        return
    if len(jobs) == 1:
        span.set_attribute("messaging.message.id", jobs[0].job_id)
        span.set_attribute("blamequeue.job.id", jobs[0].job_id)
    else:
        span.set_attribute("blamequeue.job.ids", [j.job_id for j in jobs])
    span.set_attribute("messaging.batch.message_count", len(jobs))
    deduplicated = all(j.deduplicated for j in jobs)
    span.set_attribute(OUTCOME, "deduplicated" if deduplicated else "enqueued")


def _parent(trace_id: str | None) -> Any:
    from opentelemetry import context, trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    match = _PAIR.fullmatch(trace_id or "")
    if match is None:
        return context.Context()  # a new trace
    parent = SpanContext(
        trace_id=int(match[1], 16),
        span_id=int(match[2], 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


def traced_run(
    run: Run, handler: Handler | None, invoke: Callable[[Run, Handler | None], Outcome]
) -> Outcome:
    """``invoke`` inside the attempt's span, which records how the attempt ended."""
    with _run_span(run) as span:
        try:
            outcome = invoke(run, handler)
        except JobInterrupted as exc:
            _interrupted(span, exc.reason)
            raise
        return _ended(span, outcome)


async def atraced_run(
    run: Run, handler: Handler | None, ainvoke: Callable[[Run, Handler | None], Awaitable[Outcome]]
) -> Outcome:
    """``traced_run`` for an async run (interrupted by cancelling its task)."""
    with _run_span(run) as span:
        try:
            outcome = await ainvoke(run, handler)
        except asyncio.CancelledError as exc:
            _interrupted(span, str(exc.args[0]) if exc.args else "cancelled")
            raise
        return _ended(span, outcome)


def _run_span(run: Run) -> AbstractContextManager[Any]:
    from opentelemetry.trace import SpanKind

    c = run.claimed
    attributes = {
        "messaging.system": "blamequeue",
        "messaging.operation.type": "process",
        "messaging.destination.name": c.queue,
        "messaging.message.id": c.job_id,
        "blamequeue.job.id": c.job_id,
        "blamequeue.job.name": c.name,
        "blamequeue.queue": c.queue,
        "blamequeue.job.attempt": c.attempt,
        "blamequeue.backend": run.ctx.backend.alias,
        "blamequeue.trace_id": c.trace_id or "",
    }
    span: AbstractContextManager[Any] = _tracer.start_as_current_span(
        f"run {c.name}",
        context=_parent(c.trace_id),
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )
    return span


def _interrupted(span: Any, reason: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute(OUTCOME, reason)
    span.set_status(Status(StatusCode.ERROR, reason))


def _ended(span: Any, outcome: Outcome) -> Outcome:
    from opentelemetry.trace import Status, StatusCode

    if isinstance(outcome, lifecycle.Raised):
        span.record_exception(outcome.exc)
        span.set_status(Status(StatusCode.ERROR, lifecycle.describe(outcome.exc)))
    elif isinstance(outcome, lifecycle.BadJob):
        span.set_status(Status(StatusCode.ERROR, outcome.message))
    span.set_attribute(OUTCOME, _OUTCOMES.get(type(outcome).__name__, "unknown"))
    return outcome


_OUTCOMES = {
    "Succeeded": "succeeded",
    "Raised": "failed",
    "TimedOut": "timeout",
    "Cancelled": "cancelled",
    "Released": "released",
    "BadJob": "bad_job",
    "FannedOut": "fanned_out",
}
