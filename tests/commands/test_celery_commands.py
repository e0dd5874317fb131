"""What a team moving from Celery types at the shell: ``blamequeue enqueue NAME --args
--kwargs``, a no-argument job enqueued with nothing, every queue's DLQ at once, and a plain
``runworker`` that serves the queues ``ROUTES`` sends jobs to."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import job, queue
from django_blamequeue.backends import get_backend
from django_blamequeue.jobs import registry

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


@pytest.fixture
def jobs() -> Iterator[dict[str, Any]]:
    @job(queue="celery-cmd", name="tests.cc.add")
    def add(a: int, b: int, *, scale: int = 1) -> int:
        return (a + b) * scale

    @job(queue="celery-cmd", name="tests.cc.tick")
    def tick() -> str:
        return "ticked"

    @job(queue="celery-cmd", name="tests.cc.echo")
    def echo(payload: Any) -> Any:
        return payload

    @job(queue="other-cmd", name="tests.cc.boom", max_attempts=1)
    def boom() -> None:
        raise RuntimeError("boom")

    yield {"add": add, "tick": tick, "boom": boom}
    for name in ("add", "tick", "echo", "boom"):
        registry.unregister(f"tests.cc.{name}")


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def enqueued(out: str) -> str:
    return out.split()[1]


def test_enqueue_takes_a_call_s_args_and_kwargs(jobs: dict[str, Any]) -> None:
    job_id = enqueued(
        run("blamequeue", "enqueue", "tests.cc.add", "--args", "[2, 3]", "--kwargs", '{"scale": 2}')
    )
    info = queue.get_job(job_id)
    assert info is not None and info.payload == {"__args__": [2, 3], "__kwargs__": {"scale": 2}}
    run("runworker", "celery-cmd", "--burst", "--no-sweep")
    assert queue.get_job(job_id).result == 10  # type: ignore[union-attr]


def test_a_job_that_takes_no_argument_is_enqueued_with_nothing(jobs: dict[str, Any]) -> None:
    job_id = enqueued(run("blamequeue", "enqueue", "tests.cc.tick"))
    run("runworker", "celery-cmd", "--burst", "--no-sweep")
    assert queue.get_job(job_id).result == "ticked"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tests.cc.echo"], "takes a payload: give --payload JSON"),
        (["tests.cc.add", "--args", "[1]"], "missing a required argument: 'b'"),
        (["tests.cc.add", "--args", '{"a": 1}'], "--args must be a JSON list"),
        (["tests.cc.add", "--kwargs", "[1]"], "--kwargs must be a JSON object"),
        (["tests.cc.add", "--args", "[1, 2]", "--payload", "{}"], "not both"),
        (["tests.cc.add", "--args", "[1,"], "--args is not JSON"),
    ],
)
def test_enqueue_refuses_a_call_that_cannot_run_and_writes_nothing(
    jobs: dict[str, Any], args: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message.replace("[", r"\[")):
        call_command("blamequeue", "enqueue", *args)
    assert queue.size("celery-cmd") == 0


def test_dlq_list_without_a_queue_lists_every_queue_s_dead_letters(jobs: dict[str, Any]) -> None:
    first = jobs["boom"].delay().job_id
    second = jobs["boom"].apply_async(queue="third-cmd").job_id
    run("runworker", "other-cmd", "third-cmd", "--burst", "--no-sweep")
    assert [j.job_id for j in queue.dlq_list()] == [first, second]  # oldest first, by id
    assert [j.job_id for j in queue.dlq_list(limit=1, offset=1)] == [second]
    assert [j.job_id for j in queue.dlq_list("third-cmd")] == [second]
    assert queue.dlq_size() == 2 and queue.dlq_size("other-cmd") == 1
    listing = run("blamequeue", "dlq", "list")
    assert first in listing and second in listing


def test_a_plain_runworker_serves_the_queues_routes_send_jobs_to(
    jobs: dict[str, Any], settings: SettingsWrapper
) -> None:
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "ROUTES": {"tests.cc.*": "routed-cmd"}}
    handle = jobs["add"].delay(1, 2)
    assert handle.queue_name == "routed-cmd"
    out = run("runworker", "--burst", "--no-sweep")
    assert "routed-cmd" in out  # in the banner's queues
    assert handle.info().result == 3  # type: ignore[union-attr]


def test_a_route_to_nothing_is_an_error_of_manage_py_check(settings: SettingsWrapper) -> None:
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "ROUTES": {"tests.*": {"queue": ""}}}
    with pytest.raises(SystemCheckError) as caught:
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())
    assert "blamequeue.E042" in str(caught.value) and "expected a queue name" in str(caught.value)
    settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "ROUTES": {"tests.*": "fine"}}
    json.dumps(run("check"))  # passes


def test_enqueue_expires_and_stats_tell_the_jobs_that_expired(jobs: dict[str, Any]) -> None:
    job_id = enqueued(run("blamequeue", "enqueue", "tests.cc.tick", "--expires", "60"))
    engine = get_backend(None)
    assert "expired in the last hour" not in run("blamequeue", "stats")
    assert engine.expire(now=engine.now() + timedelta(seconds=61)) == [job_id]
    expected = "expired in the last hour (not started in time): 'celery-cmd' 1 (default)"
    assert expected in run("blamequeue", "stats").splitlines()
