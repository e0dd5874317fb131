"""Describing a handler's exception never raises and stays bounded, so a
hostile exception fails its own job and the worker goes on with the others."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_blamequeue import job, queue
from django_blamequeue.core.lifecycle import DESCRIBE_LIMIT, describe
from django_blamequeue.jobs import registry


class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken")


class BothRaise(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken")

    def __repr__(self) -> str:
        raise RuntimeError("__repr__ is broken too")


class StrExits(Exception):
    def __str__(self) -> str:
        raise SystemExit(3)


class NotAString(Exception):
    def __str__(self) -> Any:
        return 42


class Fatal(BaseException):
    """A BaseException a handler may raise (not one of the worker's interrupts)."""


def test_an_exception_whose_str_raises_is_described_by_its_type_and_repr() -> None:
    text = describe(StrRaises("secret"))
    assert text.startswith("StrRaises: (str() failed) StrRaises('secret')")


def test_an_exception_whose_str_and_repr_raise_is_described_by_its_type() -> None:
    assert describe(BothRaise()) == "BothRaise: (str() and repr() failed)"


def test_a_str_that_raises_system_exit_is_contained() -> None:
    assert describe(StrExits()).startswith("StrExits: (str() failed)")


def test_a_str_that_answers_no_string_is_described_by_repr() -> None:
    assert describe(NotAString("x")).startswith("NotAString: (str() failed)")


def test_a_ten_megabyte_message_is_cut_to_the_limit_and_says_so() -> None:
    text = describe(ValueError("x" * 10_000_000))
    assert len(text) <= DESCRIBE_LIMIT
    assert text.startswith("ValueError: xxx") and text.endswith("more characters]")


def test_ordinary_exceptions_are_described_as_before() -> None:
    assert describe(ValueError("bad value")) == "ValueError: bad value"
    assert describe(KeyError("k")) == "KeyError: 'k'"
    assert describe(RuntimeError()) == "RuntimeError"
    assert describe(Fatal("stop")) == "Fatal: stop"


# -- through a worker ------------------------------------------------------------------------
HOSTILE: dict[str, BaseException] = {
    "nul": ValueError("a\x00b"),
    "str-raises": StrRaises("boom"),
    "both-raise": BothRaise(),
    "huge": ValueError("y" * 10_000_000),
    "base-exception": Fatal("a BaseException subclass"),
}


@pytest.fixture
def hostile_job() -> Iterator[str]:
    @job(queue="hostile", name="tests.hardening.hostile", max_attempts=1)
    def run(payload: dict[str, Any]) -> Any:
        if payload["raise"]:
            raise HOSTILE[payload["raise"]]
        return {"ok": payload["n"]}

    yield "tests.hardening.hostile"
    registry.unregister("tests.hardening.hostile")


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_hostile_exceptions_fail_their_own_jobs_while_good_jobs_finish(
    backend: str, hostile_job: str
) -> None:
    run_hostile(backend, hostile_job, [k for k in HOSTILE if k != "nul"])


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_an_error_text_with_nul_fails_only_its_own_job(backend: str, hostile_job: str) -> None:
    run_hostile(backend, hostile_job, ["nul"])


def run_hostile(backend: str, hostile_job: str, kinds: list[str]) -> None:
    payloads = [{"raise": None, "n": i} for i in range(12)]
    for i, kind in enumerate(kinds):  # spread among the good ones, claimed together
        payloads.insert(3 * i + 1, {"raise": kind, "n": -1})
    ids = [
        j.job_id for j in queue.enqueue_many("hostile", payloads, name=hostile_job, backend=backend)
    ]
    consumer = queue.consume("hostile", None, backend=backend, concurrency=4, burst=True)
    assert consumer.join(timeout=60), "the worker did not drain the queue"
    infos = {
        p["raise"] or f"good-{p['n']}": queue.get_job(i, backend=backend)
        for p, i in zip(payloads, ids, strict=True)
    }
    good = [v for k, v in infos.items() if k.startswith("good-")]
    assert [j.state for j in good] == ["done"] * 12  # type: ignore[union-attr]
    assert all(infos[k].state == "failed" for k in kinds)  # type: ignore[union-attr]
    errors = {k: str(infos[k].error) for k in kinds}  # type: ignore[union-attr]
    expected = {
        "nul": "ValueError: a\\x00b",  # NUL is stored escaped (texts.storable)
        "str-raises": "StrRaises: (str() failed) StrRaises('boom')",
        "both-raise": "BothRaise: (str() and repr() failed)",
        "huge": "ValueError: yyyy",
        "base-exception": "Fatal: a BaseException subclass",
    }
    assert all(errors[k].startswith(expected[k]) for k in kinds), errors
    assert all(len(e) <= DESCRIBE_LIMIT for e in errors.values())
