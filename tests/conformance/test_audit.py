"""Audit: a row per event as ``AUDIT`` decides, written in the transaction of the state
change; the ``audit_event`` signal for every event, after commit, never on rollback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from django_blamequeue import audit, queue
from django_blamequeue.backends.base import Backend
from django_blamequeue.signals import audit_event
from django_blamequeue.testing import capture_events

from .support import (
    audit_rows,
    claim_one,
    fail,
    in_transaction,
    jobs_in,
    relay,
    succeed,
    to_dlq,
)


class Rollback(Exception):
    pass


def rows(engine: Backend) -> list[str]:
    return list(audit_rows(engine).order_by("id").values_list("action", flat=True))


def happy_path(engine: Backend, backend: str) -> str:
    job_id = queue.enqueue("audit", {}, backend=backend).job_id
    succeed(engine, claim_one(engine, "audit"))
    return job_id


def sad_path(engine: Backend, backend: str) -> str:
    job_id = queue.enqueue("audit", {}, max_attempts=1, backend=backend).job_id
    fail(engine, claim_one(engine, "audit"))
    queue.purge("audit", backend=backend)
    return job_id


def test_the_action_names_are_the_designs() -> None:
    prefix = "system.queue."
    assert {
        audit.ENQUEUE,
        audit.CONSUME_START,
        audit.CONSUME_SUCCESS,
        audit.CONSUME_FAILURE,
        audit.DLQ_WRITE,
        audit.DLQ_RETRY,
        audit.LEASE_EXTENDED,
        audit.PROGRESS,
        audit.PURGE,
        audit.FLOW_ENQUEUE,
    } == {
        prefix + name
        for name in (
            "enqueue",
            "consume.start",
            "consume.success",
            "consume.failure",
            "dlq.write",
            "dlq.retry",
            "lease.extended",
            "progress",
            "purge",
            "flow.enqueue",
        )
    }


def test_audit_all_records_every_event_as_a_row(
    backend: str, engine: Backend, configure: Callable[..., None]
) -> None:
    configure(AUDIT="all")
    happy_path(engine, backend)
    sad_path(engine, backend)
    assert rows(engine) == [
        audit.ENQUEUE,
        audit.CONSUME_START,
        audit.CONSUME_SUCCESS,
        audit.ENQUEUE,
        audit.CONSUME_START,
        audit.CONSUME_FAILURE,
        audit.DLQ_WRITE,
        audit.PURGE,
    ]


def test_audit_operations_skips_the_happy_path_rows(
    backend: str, engine: Backend, configure: Callable[..., None]
) -> None:
    configure(AUDIT="operations")
    happy_path(engine, backend)
    assert rows(engine) == []
    sad_path(engine, backend)
    assert rows(engine) == [audit.CONSUME_FAILURE, audit.DLQ_WRITE, audit.PURGE]


def test_the_default_audit_level_is_operations() -> None:
    from django_blamequeue.conf import Settings

    assert Settings(backends={}).audit == "operations"


def test_audit_off_writes_no_rows(
    backend: str, engine: Backend, configure: Callable[..., None]
) -> None:
    configure(AUDIT="off")
    happy_path(engine, backend)
    sad_path(engine, backend)
    assert rows(engine) == []


@pytest.mark.parametrize("level", ["all", "operations", "off"])
def test_the_signal_is_sent_for_every_event_whatever_the_level(
    backend: str, engine: Backend, configure: Callable[..., None], level: str
) -> None:
    configure(AUDIT=level)
    with capture_events() as events:
        job_id = happy_path(engine, backend)
    assert events.actions(job_id) == [audit.ENQUEUE, audit.CONSUME_START, audit.CONSUME_SUCCESS]
    start = events.of(audit.CONSUME_START)[0]
    assert (start.job_id, start.queue, start.backend, start.attempt) == (
        job_id,
        "audit",
        backend,
        1,
    )


def test_the_signal_carries_the_event_and_its_fields(backend: str) -> None:
    received: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        received.append(kwargs)

    audit_event.connect(receiver, weak=False)
    try:
        job_id = queue.enqueue("audit", {}, backend=backend).job_id
    finally:
        audit_event.disconnect(receiver)
    assert len(received) == 1
    got = received[0]
    assert (got["action"], got["job_id"], got["queue"], got["backend"]) == (
        audit.ENQUEUE,
        job_id,
        "audit",
        backend,
    )
    assert isinstance(got["event"], audit.Event)


def test_the_signal_is_sent_after_commit(backend: str, engine: Backend) -> None:
    """On the local backend at COMMIT; through the outbox, once the relay delivered the job."""
    with capture_events() as events:
        with in_transaction(engine):
            job_id = queue.enqueue("audit", {}, backend=backend).job_id
            assert events.events == []
        assert events.wait_for_action(audit.ENQUEUE, job_id=job_id, timeout=10)
        assert events.actions() == [audit.ENQUEUE]


def test_the_signal_is_not_sent_on_rollback(backend: str, engine: Backend) -> None:
    with capture_events() as events:
        with pytest.raises(Rollback), in_transaction(engine):
            queue.enqueue("audit", {}, backend=backend)
            raise Rollback
        relay(engine)  # anything committed would be delivered now
        queue.enqueue("audit", {"after": True}, backend=backend)
    assert events.actions() == [audit.ENQUEUE]  # only the committed one


@pytest.mark.requires("transactional_enqueue")
def test_audit_rows_are_written_in_the_transaction_of_the_state_change(
    backend: str, engine: Backend, configure: Callable[..., None]
) -> None:
    """Where the jobs live in the database (the local backend), the row and the change
    commit or roll back together."""
    configure(AUDIT="all")
    job_id = to_dlq(engine, "audit")
    before = rows(engine)
    with pytest.raises(Rollback), in_transaction(engine):
        assert queue.dlq_retry(job_id, backend=backend)
        assert rows(engine)[-1] == audit.DLQ_RETRY  # in the transaction, beside the change
        raise Rollback
    assert rows(engine) == before
    assert queue.get_job(job_id, backend=backend).state == "failed"  # type: ignore[union-attr]


def test_an_enqueue_rolled_back_leaves_no_audit_row(
    backend: str, engine: Backend, configure: Callable[..., None]
) -> None:
    configure(AUDIT="all")
    with pytest.raises(Rollback), in_transaction(engine):
        queue.enqueue("audit", {}, backend=backend)
        if engine.transactional_enqueue:
            assert rows(engine) == [audit.ENQUEUE]  # a row of this transaction
        raise Rollback
    relay(engine)
    assert rows(engine) == []
    assert jobs_in(engine, "audit") == 0
