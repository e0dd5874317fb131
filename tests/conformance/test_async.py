"""``async def`` handlers run on the worker's event loop, many at once within
``concurrency``, under every lifecycle rule: lease renewal while they await, timeout and cancel
by cancelling their task, graceful shutdown, ``current_job()`` inside them, Django's async ORM,
and ``aenqueue`` from async code. A worker runs sync and async jobs side by side."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from django_blamequeue import ErrorCode, QueueError, current_job, queue
from django_blamequeue.audit import DLQ_WRITE, LOCK_LOST, RELEASE, STALLED
from django_blamequeue.backends.base import Backend
from django_blamequeue.models import AuditEvent
from django_blamequeue.testing import capture_events, wait_until

from .support import claim_one, row


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Lets handlers that wait for the test go at its end."""
    event = threading.Event()
    yield event
    event.set()


async def until(event: threading.Event, seconds: float = 30) -> None:
    """Await (without blocking the loop) until the test sets ``event``."""
    deadline = time.monotonic() + seconds
    while not event.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


def state(job_id: str, backend: str) -> str | None:
    info = queue.get_job(job_id, backend=backend)
    return info.state if info is not None else None


def test_an_async_handler_runs_on_the_event_loop_and_its_result_is_stored(
    backend: str, register: Callable[..., Any]
) -> None:
    seen: dict[str, Any] = {}

    async def fetch(payload: Any) -> dict[str, Any]:
        await asyncio.sleep(0.01)
        ctx = current_job()
        seen.update(job_id=ctx.job_id, attempt=ctx.attempt, loop=asyncio.get_running_loop())
        seen["thread"] = threading.current_thread().name
        return {"got": payload["n"] * 2}

    definition = register(fetch)
    assert definition.is_async
    job_id = definition.enqueue({"n": 21}, backend=backend).job_id
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: state(job_id, backend) == "done", 10)
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and info.result == {"got": 42} and info.attempts == 1
    assert (seen["job_id"], seen["attempt"], seen["thread"]) == (job_id, 1, "blamequeue-loop")


def test_many_async_jobs_await_at_once_up_to_the_concurrency(
    backend: str, register: Callable[..., Any], release: threading.Event
) -> None:
    """Twelve jobs, concurrency 8: eight await together (one loop, no thread each), never a
    ninth; each one's ``current_job()`` is its own."""
    running: set[str] = set()
    most = [0]
    mixed: list[str] = []

    async def wait_together(payload: Any) -> None:
        job_id = current_job().job_id
        running.add(job_id)
        most[0] = max(most[0], len(running))
        await until(release, 10)
        if current_job().job_id != job_id:
            mixed.append(job_id)
        running.discard(job_id)

    definition = register(wait_together)
    ids = [definition.enqueue(i, backend=backend).job_id for i in range(12)]
    threads = threading.active_count()
    queue.consume(definition.queue, None, backend=backend, concurrency=8, poll_interval=0.05)
    assert wait_until(lambda: len(running) == 8, 10)
    assert threading.active_count() <= threads + 4  # consumer, loop, ORM thread, a listener
    release.set()
    assert wait_until(lambda: all(state(j, backend) == "done" for j in ids), 20)
    assert most[0] == 8 and mixed == []


def test_a_worker_runs_sync_and_async_jobs_side_by_side(
    backend: str, register: Callable[..., Any], release: threading.Event
) -> None:
    started: set[str] = set()

    def blocking(payload: Any) -> str:
        started.add("sync")
        release.wait(10)
        return "sync done"

    async def awaiting(payload: Any) -> str:
        started.add("async")
        await until(release, 10)
        return "async done"

    queue_name = "mixed"
    sync_job = register(blocking, queue=queue_name).enqueue({}, backend=backend).job_id
    async_job = register(awaiting, queue=queue_name).enqueue({}, backend=backend).job_id
    queue.consume(queue_name, None, backend=backend, concurrency=2, poll_interval=0.05)
    assert wait_until(lambda: started == {"sync", "async"}, 10)  # both at once
    release.set()
    assert wait_until(lambda: state(sync_job, backend) == state(async_job, backend) == "done", 10)
    results = [queue.get_job(j, backend=backend).result for j in (sync_job, async_job)]  # type: ignore[union-attr]
    assert results == ["sync done", "async done"]


def test_an_async_handler_past_its_timeout_is_cancelled_and_fails_with_reason_timeout(
    backend: str, register: Callable[..., Any]
) -> None:
    saw: list[str] = []

    async def slow(payload: Any) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError as exc:
            saw.append(str(exc.args[0]) if exc.args else "")
            raise

    definition = register(slow, timeout=0.3, max_attempts=1)
    job_id = definition.enqueue({}, backend=backend).job_id
    started = time.monotonic()
    with capture_events() as events:
        queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
        assert events.wait_for_action(DLQ_WRITE, job_id=job_id, timeout=10)
    assert time.monotonic() - started < 5
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and (info.state, info.reason) == ("failed", "timeout")
    assert wait_until(lambda: bool(saw), 5)
    assert saw == ["timeout"]


def test_a_running_async_job_is_cancelled_through_its_task(
    backend: str, register: Callable[..., Any]
) -> None:
    running = threading.Event()
    saw: list[bool] = []

    async def long(payload: Any) -> None:
        running.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            saw.append(current_job().cancelled)
            raise

    definition = register(long)
    job_id = definition.enqueue({}, backend=backend).job_id
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert running.wait(10)
    assert queue.cancel(job_id, backend=backend) is True
    assert wait_until(lambda: state(job_id, backend) == "cancelled", 10)
    assert wait_until(lambda: bool(saw), 5)
    assert saw == [True]


def test_a_cancelled_error_the_handler_raises_itself_fails_the_attempt(
    backend: str, register: Callable[..., Any]
) -> None:
    async def gives_up(payload: Any) -> None:
        raise asyncio.CancelledError("gave up")

    definition = register(gives_up, max_attempts=1)
    job_id = definition.enqueue({}, backend=backend).job_id
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: state(job_id, backend) == "failed", 10)
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and info.error and "CancelledError" in info.error


def test_the_lease_of_an_awaiting_job_is_renewed(
    backend: str, engine: Backend, register: Callable[..., Any]
) -> None:
    """Lease 1 s, a handler that awaits 2.5 s, a rescuer pass every 50 ms: never rescued."""
    running = threading.Event()

    async def awaits_long(payload: Any) -> str:
        running.set()
        await asyncio.sleep(2.5)
        return "finished"

    definition = register(awaits_long)
    job_id = definition.enqueue({}, backend=backend).job_id
    with capture_events() as events:
        queue.consume(definition.queue, None, backend=backend, lease=1, poll_interval=0.05)
        assert running.wait(10)
        while row(engine, job_id)["state"] == "inflight":
            report = engine.rescue_expired()
            assert (report.repended, report.failed) == (0, 0), "a renewed lease was rescued"
            time.sleep(0.05)  # pacing the rescuer
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and (info.state, info.attempts, info.result) == ("done", 1, "finished")
    assert not events.of(STALLED) and not events.of(LOCK_LOST)


def test_a_graceful_shutdown_releases_an_async_job_that_outlives_the_grace(
    backend: str, engine: Backend, register: Callable[..., Any]
) -> None:
    running = threading.Event()
    saw: list[str] = []

    async def endless(payload: Any) -> None:
        running.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError as exc:
            saw.append(str(exc.args[0]) if exc.args else "")
            raise

    definition = register(endless, max_attempts=1)
    job_id = definition.enqueue({}, backend=backend).job_id
    consumer = queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert running.wait(10)
    with capture_events() as events:
        consumer.cancel(grace=0.2)
        assert consumer.join(10)
    r = row(engine, job_id)
    assert (r["state"], r["attempts"], r["lease_expires_at"]) == ("pending", 0, None)
    assert [(e.action, e.job_id) for e in events.events] == [(RELEASE, job_id)]
    assert saw == ["shutdown"]
    again = claim_one(engine, definition.queue)
    assert (again.job_id, again.attempt) == (job_id, 1)


def test_a_graceful_shutdown_lets_an_async_job_finish_within_the_grace(
    backend: str, register: Callable[..., Any]
) -> None:
    running = threading.Event()

    async def short(payload: Any) -> str:
        running.set()
        await asyncio.sleep(0.3)
        return "finished"

    definition = register(short)
    job_id = definition.enqueue({}, backend=backend).job_id
    consumer = queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert running.wait(10)
    consumer.cancel(grace=10)
    assert consumer.join(10)
    info = queue.get_job(job_id, backend=backend)
    assert info is not None and (info.state, info.result) == ("done", "finished")


def test_an_async_handler_uses_the_async_orm(backend: str, register: Callable[..., Any]) -> None:
    async def writes(payload: Any) -> int:
        ctx = current_job()
        await AuditEvent.objects.using("default").acreate(action="test.async", job_id=ctx.job_id)
        return await AuditEvent.objects.using("default").filter(job_id=ctx.job_id).acount()

    definition = register(writes)
    job_id = definition.enqueue({}, backend=backend).job_id
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: state(job_id, backend) == "done", 10)
    assert AuditEvent.objects.using("default").filter(action="test.async", job_id=job_id).exists()
    assert queue.get_job(job_id, backend=backend).result >= 1  # type: ignore[union-attr]


def test_a_consume_handler_may_be_async(backend: str) -> None:
    async def handler(job: Any, ctx: Any) -> str:
        await asyncio.sleep(0)
        return f"{job.payload}:{ctx.attempt}"

    job_id = queue.enqueue("plain-async", "x", backend=backend).job_id
    queue.consume("plain-async", handler, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: state(job_id, backend) == "done", 10)
    assert queue.get_job(job_id, backend=backend).result == "x:1"  # type: ignore[union-attr]


def test_progress_and_lease_extension_from_an_async_handler(
    backend: str, engine: Backend, register: Callable[..., Any]
) -> None:
    seen: dict[str, Any] = {}

    async def reports(payload: Any) -> None:
        ctx = current_job()
        await ctx.aprogress(40)
        seen["progress"] = (await sync_to_async(row)(engine, ctx.job_id))["progress"]
        ctx.progress(60)  # does not block the loop: written in the background
        try:
            ctx.extend_lease(60)
        except QueueError as exc:
            seen["sync_extend"] = exc.code
        if engine.supports_extend_lease:
            seen["extended"] = await ctx.aextend_lease(60)

    definition = register(reports)
    job_id = definition.enqueue({}, backend=backend).job_id
    queue.consume(definition.queue, None, backend=backend, poll_interval=0.05)
    assert wait_until(lambda: state(job_id, backend) == "done", 10)
    assert seen["progress"] == 40
    expected = ErrorCode.INVALID_HANDLER if engine.supports_extend_lease else None
    assert seen.get("sync_extend", ErrorCode.EXTEND_LEASE_UNSUPPORTED) in (
        expected,
        ErrorCode.EXTEND_LEASE_UNSUPPORTED,
    )
    assert seen.get("extended", True) is True


def test_aenqueue_stores_jobs_from_async_code(backend: str, register: Callable[..., Any]) -> None:
    async def noop(payload: Any) -> None:
        return None

    definition = register(noop)

    async def view() -> list[str]:
        one = await queue.aenqueue(
            definition.queue, {"a": 1}, name=definition.name, backend=backend
        )
        two = await definition.aenqueue({"b": 2}, backend=backend, priority=3)
        many = await queue.aenqueue_many("other", [1, 2], backend=backend)
        return [one.job_id, two.job_id, *(m.job_id for m in many)]

    ids = async_to_sync(view)()
    infos = [queue.get_job(j, backend=backend) for j in ids]
    assert [(i.queue, i.payload) for i in infos if i] == [
        (definition.queue, {"a": 1}),
        (definition.queue, {"b": 2}),
        ("other", 1),
        ("other", 2),
    ]
    assert infos[1] is not None and infos[1].priority == 3


def test_aenqueue_refuses_bad_input_with_the_same_errors(backend: str) -> None:
    with pytest.raises(QueueError) as caught:
        async_to_sync(queue.aenqueue)("q", {}, priority="high", backend=backend)
    assert caught.value.code == ErrorCode.BAD_ARGUMENT
