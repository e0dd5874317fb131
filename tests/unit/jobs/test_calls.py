"""Without a worker: calling a ``@job`` function directly (a stand-in
``current_job()``), the argument envelope of ``.delay``, the ``countdown``/``eta`` aliases,
and ``@job``'s own backoff options."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from django_blamequeue import QueueError, current_job, job
from django_blamequeue.exceptions import ErrorCode
from django_blamequeue.jobs import registry
from django_blamequeue.jobs.calls import aliases, call_with, envelope, is_call


@pytest.fixture
def names() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        registry.unregister(name)


def test_a_job_function_called_directly_runs_with_a_stand_in_context(names: list[str]) -> None:
    @job(queue="direct", name="tests.unit.direct")
    def send_welcome(user_id: int, lang: str = "en") -> dict[str, Any]:
        ctx = current_job()
        ctx.progress(50)  # records nothing, refuses nothing valid
        assert ctx.extend_lease(10) and not ctx.cancelled
        return {
            "user": user_id,
            "lang": lang,
            "ctx": (ctx.direct, ctx.name, ctx.queue, ctx.attempt),
        }

    names.append(send_welcome.name)
    assert send_welcome(42, lang="de") == {
        "user": 42,
        "lang": "de",
        "ctx": (True, "tests.unit.direct", "direct", 1),
    }
    with pytest.raises(QueueError) as outside:  # outside a job and a direct call: as before
        current_job()
    assert outside.value.code == ErrorCode.INVALID_HANDLER


def test_each_direct_call_has_its_own_job_id_and_checks_progress(names: list[str]) -> None:
    @job(queue="direct", name="tests.unit.ids")
    def ids(payload: Any) -> str:
        return current_job().job_id

    names.append(ids.name)
    assert ids(None) != ids(None)

    @job(queue="direct", name="tests.unit.progress")
    def bad_progress(payload: Any) -> None:
        current_job().progress(101)

    names.append(bad_progress.name)
    with pytest.raises(QueueError):
        bad_progress(None)


def test_an_async_job_function_called_directly_sees_its_context_while_it_runs(
    names: list[str],
) -> None:
    @job(queue="direct", name="tests.unit.async")
    async def fetch(url: str) -> tuple[str, bool]:
        await asyncio.sleep(0)
        return url, current_job().direct

    names.append(fetch.name)
    assert asyncio.run(fetch("https://example.com")) == ("https://example.com", True)


def test_delay_stores_an_argument_envelope_and_the_worker_unpacks_it() -> None:
    payload = envelope((1, "a"), {"lang": "de"})
    assert payload == {"__args__": [1, "a"], "__kwargs__": {"lang": "de"}} and is_call(payload)
    assert call_with(lambda *a, **k: (a, k), payload) == ((1, "a"), {"lang": "de"})
    assert call_with(lambda p: p, {"__args__": [1]}) == {"__args__": [1]}  # not an envelope
    for args, kwargs in ((1, None), ("ab", None), ((), {1: 2}), ((), [("a", 1)])):
        with pytest.raises(QueueError) as caught:
            envelope(args, kwargs)  # type: ignore[arg-type]
        assert caught.value.code == ErrorCode.BAD_ARGUMENT


def test_countdown_and_eta_are_aliases_and_conflicts_are_refused() -> None:
    assert aliases({"countdown": 5, "priority": 1}) == {"delay": 5, "priority": 1}
    assert aliases({"eta": "t"}) == {"run_at": "t"}
    for bad in ({"countdown": 1, "delay": 2}, {"eta": 1, "run_at": 1}, {"countdown": 1, "eta": 2}):
        with pytest.raises(QueueError) as caught:
            aliases(bad)
        assert caught.value.code == ErrorCode.BAD_ARGUMENT


@pytest.mark.parametrize(
    "options",
    [
        {"backoff_base": 0},
        {"backoff_base": float("nan")},
        {"backoff_max": -1},
        {"backoff_max": True},
        {"jitter": "yes"},
    ],
)
def test_job_refuses_backoff_options_that_are_not_seconds(options: dict[str, Any]) -> None:
    with pytest.raises(QueueError) as caught:
        job(queue="q", **options)
    assert caught.value.code == ErrorCode.INVALID_HANDLER


def test_job_keeps_its_backoff_options(names: list[str]) -> None:
    @job(queue="q", name="tests.unit.backoff", backoff_base=2, backoff_max=60, jitter=True)
    def f(payload: Any) -> None: ...

    names.append(f.name)
    assert (f.options.backoff_base, f.options.backoff_max, f.options.jitter) == (2.0, 60.0, True)
