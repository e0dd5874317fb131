"""The worker's main loop survives any exception from a backend call —
claims, acks, heartbeats, backlog reads — logs it, backs off and keeps its acks to send again;
an ack the engine refuses for good is sent plain, then given up, and never holds back the
others. Only an exception that escapes every round ends the loop, and ``runworker`` then
exits 70 so that a supervisor restarts it.

The failures are injected at the backend's verbs (a unit seam) around the real engine."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_blamequeue import job, queue
from django_blamequeue.backends import get_backend
from django_blamequeue.jobs import registry
from django_blamequeue.management.commands.runworker import EXIT_DIED
from tests.conftest import need_server

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


class Boom(Exception):
    """Not a QueueError, not an engine error the breaker knows: a bug or a refusal."""


def failing(verb: Callable[..., Any], times: int, exc: BaseException) -> Callable[..., Any]:
    """``verb`` that raises ``exc`` on its first ``times`` calls."""
    calls = {"n": 0}

    def call(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] <= times:
            raise exc
        return verb(*args, **kwargs)

    return call


@pytest.fixture
def slow_job() -> Iterator[str]:
    @job(queue="survive", name="tests.hardening.survive", max_attempts=1)
    def run(payload: dict[str, Any]) -> Any:
        if payload.get("fail"):
            raise ValueError(f"job {payload['n']} failed")
        return payload["n"]

    yield "tests.hardening.survive"
    registry.unregister("tests.hardening.survive")


def test_the_worker_survives_exceptions_from_every_backend_call(
    backend: str, slow_job: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = get_backend(backend)
    for verb in ("claim", "apply_and_claim", "apply_many", "renew_leases", "backlog"):
        monkeypatch.setattr(engine, verb, failing(getattr(engine, verb), 2, Boom(verb)))
    payloads = [{"n": i, "fail": i % 5 == 0} for i in range(20)]
    jobs = queue.enqueue_many("survive", payloads, name=slow_job, backend=backend)
    consumer = queue.consume("survive", None, backend=backend, concurrency=4, burst=True, lease=2)
    assert consumer.join(timeout=60), "the worker did not drain the queue"
    assert consumer.failure is None
    states = [queue.get_job(j.job_id, backend=backend).state for j in jobs]  # type: ignore[union-attr]
    assert states == ["failed" if p["fail"] else "done" for p in payloads]


def test_an_ack_the_engine_refuses_is_sent_plain_and_never_holds_back_the_others(
    backend: str, slow_job: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine that refuses one job's ack, as PostgreSQL refused a NUL in an error text
    (a report from a hardening round): the other acks of its batch are applied, the refused one goes
    again with a plain ASCII note instead of its texts, and the job is failed with it."""
    engine = get_backend(backend)
    jobs = queue.enqueue_many(
        "survive", [{"n": i} for i in range(8)], name=slow_job, backend=backend
    )
    poison = jobs[3].job_id

    def refuse_texts(verb: Callable[..., Any]) -> Callable[..., Any]:
        def call(acks: Any, *args: Any, **kwargs: Any) -> Any:
            if any(a.job_id == poison and a.transition.error is None for a in acks):
                raise Boom("value too long for type character varying")  # a DataError's words
            return verb(acks, *args, **kwargs)

        return call

    monkeypatch.setattr(engine, "apply_many", refuse_texts(engine.apply_many))
    monkeypatch.setattr(engine, "apply_and_claim", refuse_texts(engine.apply_and_claim))
    consumer = queue.consume("survive", None, backend=backend, concurrency=4, burst=True)
    assert consumer.join(timeout=60), "the worker did not drain the queue"
    infos = {j.job_id: queue.get_job(j.job_id, backend=backend) for j in jobs}
    assert all(i.state == "done" for k, i in infos.items() if k != poison)  # type: ignore[union-attr]
    refused = infos[poison]
    assert refused is not None and (refused.state, refused.reason) == ("failed", "error")
    assert "the backend refused to store this attempt's outcome (Boom: value too long" in (
        refused.error or ""
    )


def test_runworker_exits_70_when_its_main_loop_dies(
    backend: str, slow_job: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something that escapes every round's guard (here ``SystemExit`` from a claim): the
    worker says so and exits 70, not 0, so ``Restart=on-failure`` restarts it."""
    engine = get_backend(backend)
    monkeypatch.setattr(engine, "claim", failing(engine.claim, 1, SystemExit(3)))
    monkeypatch.setattr(engine, "apply_and_claim", failing(engine.claim, 1, SystemExit(3)))
    queue.enqueue("survive", {"n": 1}, name=slow_job, backend=backend)
    with pytest.raises(CommandError) as caught:
        call_command("runworker", "survive", "--backend", backend, "--no-sweep", stdout=None)
    assert caught.value.returncode == EXIT_DIED == 70
    assert "main loop died" in str(caught.value)


def test_a_worker_of_several_backends_exits_70_when_one_loop_dies_and_stops_the_others(
    slow_job: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One process, two backends: the default one's loop dies, the other one's (which would
    otherwise wait for work for ever) is stopped, and the process exits 70 as a whole."""
    need_server("postgres")
    engine = get_backend("default")
    monkeypatch.setattr(engine, "claim", failing(engine.claim, 1, SystemExit(3)))
    monkeypatch.setattr(engine, "apply_and_claim", failing(engine.claim, 1, SystemExit(3)))
    queue.enqueue("survive", {"n": 1}, name=slow_job, backend="default")
    with pytest.raises(CommandError) as caught:
        call_command(
            "runworker",
            "survive",
            "--backend",
            "default",
            "--backend",
            "postgres",
            "--no-sweep",
            stdout=None,
        )
    assert caught.value.returncode == EXIT_DIED
    assert "main loop died" in str(caught.value)
    assert not [w for w in queue.workers(backend="postgres") if w.live]


def test_runworker_refuses_an_unknown_backend_among_several_and_starts_no_loop() -> None:
    with pytest.raises(CommandError, match="nope"):
        call_command(
            "runworker", "survive", "--backend", "default", "--backend", "nope", stdout=None
        )
    assert queue.workers(backend="default") == []
