"""OpenTelemetry: a span per enqueue and per run, one trace through the job's trace id."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from django_blamequeue import queue
from django_blamequeue.observability import tracing
from django_blamequeue.testing import capture_jobs, wait_until
from tests.observability import handlers

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


@pytest.fixture(autouse=True)
def _fast_retries(settings: Any) -> None:
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "BACKOFF_BASE": 0.01, "BACKOFF_MAX": 0.02}


@contextmanager
def worker(backend: str) -> Iterator[None]:
    consumer = queue.consume("obs", None, backend=backend, poll_interval=0.05)
    try:
        yield
    finally:
        consumer.cancel(grace=5)
        consumer.join(10)


def named(spans: Any, prefix: str) -> list[Any]:
    return [s for s in spans.get_finished_spans() if s.name.startswith(prefix)]


def run_until(spans: Any, backend: str, count: int) -> list[Any]:
    with worker(backend):
        assert wait_until(lambda: len(named(spans, "run ")) >= count, timeout=15)
    return named(spans, "run ")


def test_the_run_span_is_a_child_of_the_enqueue_span_in_one_trace(spans: Any, backend: str) -> None:
    tracer = tracing._tracer
    with tracer.start_as_current_span("request") as request:
        job_id = handlers.ok.enqueue({"n": 1}, backend=backend).job_id
    [enqueue] = named(spans, "enqueue ")
    assert enqueue.name == "enqueue obs" and enqueue.kind == SpanKind.PRODUCER
    assert enqueue.parent.span_id == request.get_span_context().span_id
    assert enqueue.attributes["blamequeue.job.id"] == job_id
    assert enqueue.attributes["blamequeue.queue"] == "obs"
    assert enqueue.attributes["blamequeue.outcome"] == "enqueued"
    ctx = enqueue.get_span_context()
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and info.trace_id == f"{ctx.trace_id:032x}-{ctx.span_id:016x}"

    [run] = run_until(spans, backend, 1)
    assert run.name == "run tests.observability.ok" and run.kind == SpanKind.CONSUMER
    assert run.get_span_context().trace_id == ctx.trace_id
    assert run.parent.span_id == ctx.span_id
    attrs = run.attributes
    assert attrs["blamequeue.job.id"] == job_id and attrs["blamequeue.queue"] == "obs"
    assert attrs["blamequeue.job.attempt"] == 1 and attrs["blamequeue.outcome"] == "succeeded"
    assert attrs["blamequeue.backend"] == backend


def test_every_attempt_gets_a_span_and_a_failure_is_an_error(spans: Any, backend: str) -> None:
    handlers.boom.enqueue({}, backend=backend)
    runs = run_until(spans, backend, 2)
    assert [r.attributes["blamequeue.job.attempt"] for r in runs] == [1, 2]
    assert {r.attributes["blamequeue.outcome"] for r in runs} == {"failed"}
    assert all(r.status.status_code == StatusCode.ERROR for r in runs)
    assert runs[0].events[0].name == "exception"
    assert runs[0].events[0].attributes["exception.type"] == "ValueError"
    assert len({r.get_span_context().trace_id for r in runs}) == 1


def test_a_timed_out_attempt_says_so(spans: Any, backend: str) -> None:
    handlers.slow.enqueue({}, backend=backend)
    [run] = run_until(spans, backend, 1)
    assert run.attributes["blamequeue.outcome"] == "timeout"
    assert run.status.status_code == StatusCode.ERROR


def test_an_async_run_is_traced_and_its_timeout_says_so(spans: Any, backend: str) -> None:
    with tracing._tracer.start_as_current_span("request"):
        handlers.fetch.enqueue({"n": 1}, backend=backend)
    handlers.async_slow.enqueue({}, backend=backend)
    runs = {r.name: r for r in run_until(spans, backend, 2)}
    ok, slow = runs["run tests.observability.fetch"], runs["run tests.observability.async_slow"]
    [enqueue] = [s for s in named(spans, "enqueue ") if s.parent is not None]
    assert ok.parent.span_id == enqueue.get_span_context().span_id
    assert ok.attributes["blamequeue.outcome"] == "succeeded"
    assert slow.attributes["blamequeue.outcome"] == "timeout"
    assert slow.status.status_code == StatusCode.ERROR


def test_a_job_enqueued_by_a_job_continues_the_trace(spans: Any, backend: str) -> None:
    handlers.parent.enqueue({"backend": backend}, backend=backend)
    runs = run_until(spans, backend, 2)
    parent_run = next(r for r in runs if r.name.endswith("parent"))
    child_run = next(r for r in runs if r.name.endswith(".ok"))
    enqueues = named(spans, "enqueue ")
    nested = next(e for e in enqueues if e.parent is not None)
    assert nested.parent.span_id == parent_run.get_span_context().span_id
    assert child_run.parent.span_id == nested.get_span_context().span_id
    assert len({s.get_span_context().trace_id for s in [*runs, *enqueues]}) == 1


def test_an_explicit_trace_id_is_kept_and_its_run_starts_a_trace(spans: Any, backend: str) -> None:
    job_id = handlers.ok.enqueue({}, backend=backend, trace_id="order-42").job_id
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and info.trace_id == "order-42"
    [run] = run_until(spans, backend, 1)
    assert run.parent is None and run.attributes["blamequeue.trace_id"] == "order-42"


def test_runs_through_run_jobs_are_traced_too(spans: Any, backend: str) -> None:
    with capture_jobs(backend) as captured:
        handlers.ok.enqueue({}, backend=backend)
        captured.run_jobs()
    [enqueue] = named(spans, "enqueue ")
    [run] = named(spans, "run ")
    assert run.parent.span_id == enqueue.get_span_context().span_id


def test_an_enqueue_many_is_one_span(spans: Any, backend: str) -> None:
    jobs = queue.enqueue_many(
        "obs", [{"i": i} for i in range(3)], name="tests.observability.ok", backend=backend
    )
    [span] = named(spans, "enqueue ")
    assert span.attributes["blamequeue.job.ids"] == tuple(j.job_id for j in jobs)
    assert span.attributes["messaging.batch.message_count"] == 3


def test_a_dag_flow_is_one_enqueue_span_and_its_jobs_share_its_trace(
    spans: Any, backend: str
) -> None:
    flow = queue.enqueue_flow(
        "obs",
        [
            {"name": "a", "job": "tests.observability.ok"},
            {"name": "b", "job": "tests.observability.ok", "depends_on": ["a"]},
        ],
        backend=backend,
    )
    [span] = named(spans, "enqueue ")
    ids = {queue.get_job(j["job_id"], backend=backend).trace_id for j in flow["jobs"]}  # type: ignore[union-attr]
    ctx = span.get_span_context()
    assert ids == {f"{ctx.trace_id:032x}-{ctx.span_id:016x}"}


def test_disabled_tracing_makes_no_spans_and_plain_trace_ids(backend: str) -> None:
    assert tracing.enabled is False
    job_id = handlers.ok.enqueue({}, backend=backend).job_id
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and re.fullmatch(r"[0-9a-f]{32}", info.trace_id or "")
