"""Where a job goes (docs/migrating.md#routing): a call's ``queue=`` (``apply_async``,
``enqueue``), else its route in ``ROUTES`` (Celery's ``task_routes``), else the ``@job``'s own
queue — on every backend; and a worker started with no queue names serves the routed queues."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from django_blamequeue import queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs import registry, routing

from .support import nothing_written


def test_a_call_routes_itself_and_runs_there(
    backend: str, engine: Backend, register: Callable[..., Any]
) -> None:
    definition = register(
        lambda url, body: {"sent": url}, name="tests.route.webhook", backend=backend
    )
    routed = definition.apply_async(["https://a.example/hook", {}], queue="webhooks-a")
    own = definition.delay("https://b.example/hook", {})
    assert (routed.queue_name, own.queue_name) == ("webhooks-a", definition.queue)
    worker = queue.consume("webhooks-a", None, backend=backend, poll_interval=0.05)
    try:
        assert routed.result(timeout=30) == {"sent": "https://a.example/hook"}
    finally:
        worker.cancel()
        worker.join(10)
    assert engine.get(own.job_id).state == "pending"  # type: ignore[union-attr]


def test_routes_send_a_job_that_names_no_queue_and_a_call_overrides_them(
    backend: str, engine: Backend, register: Callable[..., Any], configure: Callable[..., None]
) -> None:
    configure(
        ROUTES={
            "tests.route.exact": "exact",
            "tests.route.*": {"queue": "by-glob"},
        }
    )
    exact = register(lambda: None, name="tests.route.exact", backend=backend)
    globbed = register(lambda: None, name="tests.route.other", backend=backend)
    assert (routing.route(exact.name), routing.route("elsewhere.job")) == ("exact", None)
    assert exact.delay().queue_name == "exact"  # the exact name wins over the glob
    assert globbed.delay().queue_name == "by-glob"
    assert globbed.apply_async(queue="mine").queue_name == "mine"
    assert queue.enqueue("given", None, name=globbed.name, backend=backend).queue_name == "given"
    assert {"exact", "by-glob"} <= set(registry.queues())  # what a plain runworker serves


def test_a_bad_route_of_a_call_is_refused_and_nothing_is_written(
    backend: str, engine: Backend, register: Callable[..., Any]
) -> None:
    definition = register(lambda: None, backend=backend)
    for bad, code in (("", ErrorCode.MISSING_QUEUE), ("x" * 201, ErrorCode.MISSING_QUEUE)):
        with pytest.raises(QueueError) as caught:
            definition.apply_async(queue=bad)
        assert caught.value.code == code
    with pytest.raises(QueueError) as unknown:
        definition.apply_async(routing_key="emails")
    assert "use queue=" in unknown.value.message
    assert nothing_written(engine)
