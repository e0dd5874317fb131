"""Observability fixtures: metrics on for one test, traces into an in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def metrics() -> Iterator[Any]:
    from django_blamequeue.observability import metrics as module

    module.enable()
    yield module
    module.disable()


@pytest.fixture
def spans() -> Iterator[Any]:
    """Finished spans, oldest first (``spans.get_finished_spans()``), while tracing is on."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from django_blamequeue.observability import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(tracer_provider=provider)
    yield exporter
    tracing.disable()
    provider.shutdown()
