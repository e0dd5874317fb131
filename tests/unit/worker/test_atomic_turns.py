"""worker/atomic_turns: on SQLite a worker's atomic runs take turns, one at a time, and the
queues that hold only atomic jobs are left out of its claims meanwhile."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from django_blamequeue import job
from django_blamequeue.backends import get_backend
from django_blamequeue.jobs import registry
from django_blamequeue.worker.atomic_turns import Turns, describe

_n = itertools.count()
Q = "atomic-turns"


@pytest.fixture
def make_job() -> Iterator[Callable[..., str]]:
    """``make_job(stem, queue=Q, **options)``: a throwaway job, unregistered afterwards."""
    made: list[str] = []

    def make(stem: str, queue: str = Q, **options: Any) -> str:
        name = f"tests.unit.turns.{stem}.{next(_n)}"
        made.append(name)
        job(queue=queue, name=name, **options)(lambda payload: None)
        return name

    yield make
    for name in made:
        registry.unregister(name)


def run(job_id: str, *, atomic: bool, timeout: float | None = None) -> Any:
    """A stand-in for a claimed ``Run``: only what the turns read."""
    claimed = SimpleNamespace(job_id=job_id, timeout=timeout)
    invoker = (lambda r, h: None) if atomic else None
    return SimpleNamespace(claimed=claimed, invoker=invoker, deadline=1.0, definition=None)


def test_the_banner_names_the_atomic_jobs_that_take_turns(make_job: Callable[..., str]) -> None:
    names = sorted(make_job(stem, atomic=True) for stem in ("a", "b", "c", "d"))
    make_job("plain")
    make_job("elsewhere", queue="not-served", atomic=True)
    assert describe(get_backend("default"), [Q]) == (
        f"{', '.join(names[:3])} and 1 more: one at a time (SQLite writes one transaction at "
        "a time); the other jobs keep every slot"
    )


def test_no_atomic_job_served_here_means_no_turns(make_job: Callable[..., str]) -> None:
    make_job("plain")
    make_job("other-backend", atomic=True, backend="postgres")
    assert describe(get_backend("default"), [Q]) is None
    assert not Turns(get_backend("default"), [Q], dispatching=True).enabled


def test_one_atomic_run_starts_and_the_next_waits_its_turn_with_its_timeout_unstarted(
    make_job: Callable[..., str],
) -> None:
    make_job("ledger", atomic=True)
    turns = Turns(get_backend("default"), [Q, "mixed"], dispatching=True)
    first, second, plain = run("1", atomic=True), run("2", atomic=True), run("3", atomic=False)
    assert turns.admit([first, second, plain]) == [first, plain]
    assert second.deadline is None
    assert turns.due({"1": first, "2": second}) == []  # the first still runs
    second.claimed.timeout = 5.0
    [started] = turns.due({"2": second})
    assert started is second and second.deadline == pytest.approx(second.started + 5.0)


def test_while_an_atomic_run_runs_only_its_atomic_only_queues_are_left_out_of_claims(
    make_job: Callable[..., str],
) -> None:
    make_job("ledger", atomic=True)
    make_job("mixed-ledger", queue="mixed", atomic=True)
    make_job("mixed-email", queue="mixed")
    turns = Turns(get_backend("default"), [Q, "mixed", "emails"], dispatching=True)
    assert turns.claimable([Q, "mixed", "emails"]) == [Q, "mixed", "emails"]
    first = run("1", atomic=True)
    turns.admit([first])
    assert turns.claimable([Q, "mixed", "emails"]) == ["mixed", "emails"]
    turns.due({})  # it ended
    assert turns.claimable([Q, "mixed", "emails"]) == [Q, "mixed", "emails"]


def test_a_waiting_run_is_given_back_at_shutdown_or_forgotten_when_discarded(
    make_job: Callable[..., str],
) -> None:
    make_job("ledger", atomic=True)
    turns = Turns(get_backend("default"), [Q], dispatching=True)
    first, second, third = (run(str(i), atomic=True) for i in range(3))
    turns.admit([first, second, third])
    assert turns.discard(second) and not turns.discard(first)
    assert turns.release_all() == [third]
    assert turns.due({}) == []


def test_a_job_leased_here_again_ends_its_old_runs_turn_and_the_new_run_takes_one(
    make_job: Callable[..., str],
) -> None:
    make_job("ledger", atomic=True)
    turns = Turns(get_backend("default"), [Q], dispatching=True)
    old, again = run("1", atomic=True), run("1", atomic=True)  # its lease ran out meanwhile
    assert turns.admit([old]) == [old]
    assert turns.admit([again]) == []  # waits for the old run's turn ...
    [started] = turns.due({"1": again})  # ... which ended when the new run replaced it
    assert started is again
