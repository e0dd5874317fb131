"""Inspection and operations: size, purge, get_job, list_backends; amqp/nats refused."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.utils.module_loading import import_string

from django_blamequeue import ErrorCode, QueueError, queue
from django_blamequeue.audit import PURGE
from django_blamequeue.backends.base import Backend
from django_blamequeue.testing import capture_events

from .support import another_backend, claim_one, jobs_in, row, succeed, to_dlq


def one_of_each_state(engine: Backend, backend: str) -> dict[str, str]:
    """A job of queue "ops" in every state the local backend can hold at rest."""
    ids = {"failed": to_dlq(engine, "ops")}
    ids["done"] = queue.enqueue("ops", "done", backend=backend).job_id
    succeed(engine, claim_one(engine, "ops"))
    ids["inflight"] = queue.enqueue("ops", "inflight", backend=backend).job_id
    assert claim_one(engine, "ops").job_id == ids["inflight"]
    ids["cancelled"] = queue.enqueue("ops", "cancelled", backend=backend).job_id
    queue.cancel(ids["cancelled"], backend=backend)
    ids["pending"] = queue.enqueue("ops", "pending", backend=backend).job_id
    ids["delayed"] = queue.enqueue("ops", "delayed", delay=3600, backend=backend).job_id
    flow = queue.enqueue_flow(
        "ops", [{"name": "a", "delay": 3600}, {"name": "b", "depends_on": ["a"]}], backend=backend
    )
    ids["flow-pending"], ids["blocked"] = (j["job_id"] for j in flow["jobs"])
    return ids


def test_size_is_pending_plus_inflight(backend: str, engine: Backend) -> None:
    ids = one_of_each_state(engine, backend)
    assert row(engine, ids["blocked"])["state"] == "blocked"
    # pending, delayed, flow-pending (pending: delayed counts) and inflight
    assert queue.size("ops", backend=backend) == 4
    assert queue.size("elsewhere", backend=backend) == 0


def test_purge_deletes_waiting_jobs_and_answers_the_count(backend: str, engine: Backend) -> None:
    ids = one_of_each_state(engine, backend)
    with capture_events() as events:
        assert queue.purge("ops", backend=backend) == 4  # pending, delayed, flow-pending, blocked
    gone = {k for k, v in ids.items() if queue.get_job(v, backend=backend) is None}
    assert gone == {"pending", "delayed", "flow-pending", "blocked"}
    assert jobs_in(engine, "ops") == 4  # inflight, done, failed, cancelled stay
    assert [(e.action, e.data["count"]) for e in events.events] == [(PURGE, 4)]
    assert queue.purge("ops", backend=backend) == 0


def test_purge_with_a_bound_keeps_the_jobs_created_after_it(backend: str, engine: Backend) -> None:
    shown = queue.enqueue_many("ops", range(3), backend=backend)
    bound = engine.now()  # what a confirmation counted: the jobs created by then
    newer = queue.enqueue_many("ops", range(2), backend=backend)
    with capture_events() as events:
        assert queue.purge("ops", backend=backend, created_before=bound) == 3
    assert [queue.get_job(j.job_id, backend=backend) for j in shown] == [None] * 3
    assert all(queue.get_job(j.job_id, backend=backend) for j in newer)
    assert [(e.action, e.data["count"]) for e in events.events] == [(PURGE, 3)]
    assert queue.purge("ops", backend=backend, created_before=bound) == 0
    assert queue.size("ops", backend=backend) == 2


def test_purge_refuses_a_bound_that_is_not_an_aware_datetime(backend: str) -> None:
    queue.enqueue("ops", {}, backend=backend)
    for bound in ["2026-01-01", datetime(2026, 1, 1)]:
        with pytest.raises(QueueError) as caught:
            queue.purge("ops", backend=backend, created_before=bound)  # type: ignore[arg-type]
        assert caught.value.code == ErrorCode.BAD_ARGUMENT
    assert queue.size("ops", backend=backend) == 1


def test_purge_touches_only_its_queue(backend: str, engine: Backend) -> None:
    queue.enqueue_many("ops", range(3), backend=backend)
    queue.enqueue_many("keep", range(2), backend=backend)
    assert queue.purge("ops", backend=backend) == 3
    assert jobs_in(engine, "keep") == 2


def test_get_job_answers_none_for_an_unknown_id(backend: str) -> None:
    assert queue.get_job("01ZZZZZZZZZZZZZZZZZZZZZZZZ", backend=backend) is None
    assert queue.get_job("not-an-id", backend=backend) is None


def test_get_job_refuses_an_id_that_is_not_a_string(backend: str) -> None:
    with pytest.raises(QueueError) as caught:
        queue.get_job(12345, backend=backend)  # type: ignore[arg-type]
    assert caught.value.code == ErrorCode.BAD_ARGUMENT


def protocol(entry: dict[str, Any]) -> str:
    """The protocol an entry names, or that of the engine class it names (``BACKEND``)."""
    return str(entry.get("PROTOCOL") or import_string(entry["BACKEND"]).protocol)


def test_list_backends_names_each_configured_backend() -> None:
    configured = django_settings.BLAMEQUEUE["BACKENDS"]
    assert queue.list_backends() == [
        {"name": alias, "protocol": protocol(entry), "breaker_state": "closed"}
        for alias, entry in configured.items()
    ]


@pytest.mark.all_databases
def test_get_job_finds_a_job_on_a_non_default_backend_without_naming_it(
    backend: str, configure: Callable[..., None]
) -> None:
    configure(DEFAULT_BACKEND=another_backend(backend))
    job_id = queue.enqueue("ops", {"where": backend}, backend=backend).job_id
    info = queue.get_job(job_id)
    assert info is not None and (info.backend, info.payload) == (backend, {"where": backend})
    assert queue.cancel(job_id) is True  # found the same way
    assert queue.get_job(job_id).state == "cancelled"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("protocol", "named"), [("amqp", "AMQP 0-9-1 (RabbitMQ etc.)"), ("nats", "NATS JetStream")]
)
def test_amqp_and_nats_are_known_but_refused_by_name(
    settings: Any, protocol: str, named: str
) -> None:
    settings.BLAMEQUEUE = {
        **settings.BLAMEQUEUE,
        "BACKENDS": {**settings.BLAMEQUEUE["BACKENDS"], "broker": {"PROTOCOL": protocol}},
    }
    for call in (
        lambda: queue.enqueue("ops", {}, backend="broker"),
        lambda: queue.consume("ops", lambda job, ctx: None, backend="broker"),
        lambda: queue.size("ops", backend="broker"),
    ):
        with pytest.raises(QueueError) as caught:
            call()
        assert caught.value.code == ErrorCode.PROTOCOL_UNAVAILABLE
        assert named in caught.value.message
    assert queue._consumers == []


def test_an_unknown_backend_alias_is_unknown_backend() -> None:
    for call in (
        lambda: queue.size("ops", backend="nope"),
        lambda: queue.get_job("01ZZZZZZZZZZZZZZZZZZZZZZZZ", backend="nope"),
        lambda: queue.consume("ops", lambda job, ctx: None, backend="nope"),
    ):
        with pytest.raises(QueueError) as caught:
            call()
        assert caught.value.code == ErrorCode.UNKNOWN_BACKEND
