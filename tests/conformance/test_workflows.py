"""Durable workflows: recorded steps, durable timers, events, child steps, re-runs.

Each attempt of a durable job replays its handler from the top; a recorded step answers its
stored result, a timer or a wait that is not ready parks the job without spending an attempt
(docs/workflows.md). Every backend keeps the steps in a Django database beside the job's
effects, so each test here runs on all four.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction

from django_blamequeue import (
    ChildFailed,
    ErrorCode,
    NonDeterministicWorkflow,
    QueueError,
    WaitTimeout,
    current_job,
    queue,
)
from django_blamequeue.backends.base import Backend
from django_blamequeue.core.records import Claimed
from django_blamequeue.jobs import workflow_ops
from django_blamequeue.jobs.registry import JobDefinition
from django_blamequeue.testing import capture_events, wait_until
from django_blamequeue.worker import chaos
from tests.procapp.models import Write

from .support import claim_one, later, row

calls: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    calls.clear()


def counted(label: str, value: Any = None) -> Any:
    """A step's function: counts its runs under ``label``."""
    calls[label] += 1
    return value if value is not None else f"{label}-result"


def run(engine: Backend, c: Claimed, now: Any = None) -> chaos.Ran:
    return chaos.run_claimed(engine, c, None, now or engine.now())


def run_next(engine: Backend, definition: JobDefinition, now: Any = None) -> chaos.Ran:
    """Claim the workflow's next attempt and run it here, as a worker would. SQS delivers
    on its own clock (a retry's message shows after its whole-second delay): poll for it."""
    found: list[Claimed] = []
    wait_until(lambda: bool(found.extend(engine.claim([definition.queue], 1, 30, now)) or found), 5)
    assert len(found) == 1, f"expected one claimable job on {definition.queue!r}"
    return run(engine, found[0], now)


@pytest.fixture
def durable(backend: str, register: Any) -> Callable[..., JobDefinition]:
    def make(func: Callable[..., Any], **options: Any) -> JobDefinition:
        options.setdefault("max_attempts", 3)
        options.setdefault("backoff_base", 0.001)
        definition: JobDefinition = register(func, durable=True, backend=backend, **options)
        return definition

    return make


def test_a_step_runs_once_and_later_attempts_answer_its_recorded_result(
    backend: str, engine: Backend, durable: Callable[..., JobDefinition]
) -> None:
    def charge(payload: dict[str, Any]) -> list[Any]:
        ctx = current_job()
        first = ctx.step("reserve", counted, "reserve", {"sku": payload["sku"]})
        second = ctx.step("charge", counted, "charge")
        if ctx.attempt == 1:
            raise RuntimeError("the carrier API is down")
        return [first, second]

    wf = durable(charge)
    job_id = wf.enqueue({"sku": "A-1"}).job_id
    first = run_next(engine, wf)
    assert first.transition.state == "pending"  # a retry: the attempt is spent
    done = run_next(engine, wf, later(engine, 1))
    assert done.ack is not None and done.ack.state == "done"
    assert row(engine, job_id)["result"] == [{"sku": "A-1"}, "charge-result"]
    assert calls == {"reserve": 1, "charge": 1}
    views = queue.workflow_steps(job_id, backend)
    assert [(v.number, v.name, v.kind, v.status, v.attempt) for v in views] == [
        (1, "reserve", "step", "done", 1),
        (2, "charge", "step", "done", 1),
    ]
    assert views[0].preview == '{"sku":"A-1"}' and views[0].result_bytes == 13


def test_a_step_that_raises_is_not_recorded_and_runs_again_on_the_next_attempt(
    backend: str, engine: Backend, durable: Callable[..., JobDefinition]
) -> None:
    def flaky() -> str:
        calls["flaky"] += 1
        if calls["flaky"] == 1:
            raise ValueError("card declined")
        return "paid"

    def pay(payload: Any) -> Any:
        return current_job().step("pay", flaky)

    wf = durable(pay)
    job_id = wf.enqueue().job_id
    run_next(engine, wf)
    [failed] = queue.workflow_steps(job_id, backend)
    assert (failed.status, failed.error) == ("failed", "ValueError: card declined")
    run_next(engine, wf, later(engine, 1))
    assert row(engine, job_id)["result"] == "paid"
    [step] = queue.workflow_steps(job_id, backend)
    assert (step.status, step.attempt, calls["flaky"]) == ("done", 2, 2)


def test_the_same_step_name_twice_is_two_steps_by_occurrence(
    backend: str, engine: Backend, durable: Callable[..., JobDefinition]
) -> None:
    def loop(payload: Any) -> list[Any]:
        ctx = current_job()
        return [ctx.step("page", counted, f"page{i}", i) for i in range(3)]

    wf = durable(loop)
    job_id = wf.enqueue().job_id
    run_next(engine, wf)
    assert row(engine, job_id)["result"] == [0, 1, 2]
    rows = queue.workflow_steps(job_id, backend)
    assert [(v.name, v.number) for v in rows] == [("page", 1), ("page", 2), ("page", 3)]


def test_a_replay_asking_for_steps_in_another_order_raises_NonDeterministicWorkflow(
    backend: str, engine: Backend, durable: Callable[..., JobDefinition]
) -> None:
    order = ["reserve", "charge"]

    def fulfil(payload: Any) -> None:
        ctx = current_job()
        for name in order:
            ctx.step(name, counted, name)
        raise RuntimeError("the mail server is down")

    wf = durable(fulfil, max_attempts=2)
    job_id = wf.enqueue().job_id
    run_next(engine, wf)  # records both steps, then fails: retried
    order.reverse()  # a deploy that swapped the steps
    ran = run_next(engine, wf, later(engine, 1))
    assert ran.transition.state == "failed"
    error = row(engine, job_id)["error"]
    assert error.startswith("NonDeterministicWorkflow") or "NON_DETERMINISTIC_WORKFLOW" in error
    assert "'reserve'" in error and "'charge'" in error and "step 1" in error
    assert calls == {"reserve": 1, "charge": 1}  # nothing ran for the swapped order


def test_a_version_marker_keeps_a_run_recorded_on_old_code_on_its_old_path(
    backend: str, engine: Backend, durable: Callable[..., JobDefinition]
) -> None:
    deployed = {"marker": False}

    def fulfil(payload: Any) -> Any:
        ctx = current_job()
        ctx.step("reserve", counted, "reserve")
        if deployed["marker"] and ctx.version("charge", 2) >= 2:
            return ctx.step("charge-v2", counted, "charge-v2")
        charged = ctx.step("charge", counted, "charge")
        if not deployed["marker"]:
            raise RuntimeError("stopped by the deploy")
        return charged

    wf = durable(fulfil)
    old = wf.enqueue().job_id
    run_next(engine, wf)  # old code: reserve, charge, then fails: retried
    deployed["marker"] = True  # the deploy
    new = wf.enqueue().job_id
    run_next(engine, wf, later(engine, 1))
    run_next(engine, wf, later(engine, 1))
    assert row(engine, old)["result"] == "charge-result"  # replayed on its recorded path
    assert row(engine, new)["result"] == "charge-v2-result"
    assert calls == {"reserve": 2, "charge": 1, "charge-v2": 1}
    names = [v.name for v in queue.workflow_steps(new, backend)]
    assert names == ["reserve", "version:charge", "charge-v2"]


def test_an_atomic_steps_writes_land_once_when_a_stale_and_a_fresh_run_both_reach_it(
    backend: str, engine: Backend, durable: Callable[..., JobDefinition]
) -> None:
    """The stale run gets there first; the run that took the job over second."""

    def write(tag: str) -> int:
        ctx = current_job()
        Write.objects.using(engine.effects_database).create(
            job_id=ctx.job_id, attempt=ctx.attempt, token=ctx.token, tag=tag
        )
        return ctx.attempt

    def reserve(payload: Any) -> Any:
        return current_job().atomic_step("reserve", write, "reserve")

    wf = durable(reserve)
    job_id = wf.enqueue().job_id
    t = later(engine, 0)
    stale = claim_one(engine, wf.queue, lease=30, now=t)
    engine.rescue_expired(later(engine, 31, t), max_stalled=5)
    fresh = claim_one(engine, wf.queue, lease=30, now=later(engine, 32, t))
    late = run(engine, stale, later(engine, 33, t))
    taker = run(engine, fresh, later(engine, 34, t))
    assert late.ack is not None and not late.ack.ok
    assert taker.ack is not None and (taker.ack.ok, taker.ack.state) == (True, "done")
    rows = list(Write.objects.using(engine.effects_database).filter(job_id=job_id))
    assert len(rows) == 1
    [step] = queue.workflow_steps(job_id, backend)
    assert step.preview == str(rows[0].attempt)
    if engine.effects_with_ack:  # the stale run's step was fenced: it committed nothing
        assert rows[0].attempt == 2 and "LOCK_LOST" in (late.transition.error or "")


def test_an_atomic_step_that_raises_rolls_its_writes_back(
    backend: str, engine: Backend, durable: Callable[..., JobDefinition]
) -> None:
    def write_then_fail() -> None:
        ctx = current_job()
        Write.objects.using(engine.effects_database).create(
            job_id=ctx.job_id, attempt=ctx.attempt, token=ctx.token
        )
        raise RuntimeError("out of stock")

    def reserve(payload: Any) -> Any:
        return current_job().atomic_step("reserve", write_then_fail)

    wf = durable(reserve, max_attempts=1)
    job_id = wf.enqueue().job_id
    run_next(engine, wf)
    assert row(engine, job_id)["state"] == "failed"
    assert not Write.objects.using(engine.effects_database).filter(job_id=job_id).exists()
    [step] = queue.workflow_steps(job_id, backend)
    assert (step.status, step.error) == ("failed", "RuntimeError: out of stock")


@pytest.mark.requires("supports_time_travel")
def test_a_sleeping_workflow_holds_no_slot_and_resumes_at_the_next_step_when_due(
    backend: str, engine: Backend, durable: Callable[..., JobDefinition]
) -> None:
    def remind(payload: Any) -> Any:
        ctx = current_job()
        ctx.step("before", counted, "before")
        ctx.sleep(3600)
        return ctx.step("after", counted, "after")

    wf = durable(remind)
    job_id = wf.enqueue().job_id
    t = later(engine, 0)
    parked = run_next(engine, wf, t)
    assert (parked.transition.state, parked.transition.give_back_attempt) == ("pending", True)
    r = row(engine, job_id)
    assert (r["state"], r["attempts"]) == ("pending", 0)
    assert engine.claim([wf.queue], 10, 30, later(engine, 3599, t)) == []
    run_next(engine, wf, later(engine, 3601, t))
    assert row(engine, job_id)["result"] == "after-result"
    assert calls == {"before": 1, "after": 1}
    timer = queue.workflow_steps(job_id, backend)[1]
    assert (timer.kind, timer.status, timer.wake_at) == ("sleep", "done", later(engine, 3600, t))


def test_an_event_sent_while_a_workflow_waits_wakes_it_and_answers_its_payload(
    backend: str, engine: Backend, durable: Callable[..., JobDefinition]
) -> None:
    def ship(payload: dict[str, Any]) -> Any:
        ctx = current_job()
        return ctx.wait_for_event("carrier.picked_up", key=payload["order"], timeout=172800)

    wf = durable(ship)
    job_id = wf.enqueue({"order": "o-7"}).job_id
    parked = run_next(engine, wf)
    assert parked.transition.state == "pending"
    assert engine.claim([wf.queue], 10, 30) == []  # parked for two days
    with capture_events() as events:
        queue.send_event(
            "carrier.picked_up", key="o-7", payload={"tracking": "1Z9"}, backend=backend, user="ops"
        )
    [sent] = events.of(workflow_ops.WORKFLOW_EVENT)
    assert (sent.user, sent.data["event"], sent.data["key"]) == ("ops", "carrier.picked_up", "o-7")
    run_next(engine, wf)  # woken: due now
    assert row(engine, job_id)["result"] == {"tracking": "1Z9"}
    wait = queue.workflow_steps(job_id, backend)[0]
    assert (wait.kind, wait.status, wait.event) == ("event", "done", "carrier.picked_up:o-7")


def test_an_event_sent_before_anyone_waits_is_kept_and_consumed_once(
    backend: str, engine: Backend, durable: Callable[..., JobDefinition]
) -> None:
    def ship(payload: Any) -> Any:
        return current_job().wait_for_event("paid", key="o-1", timeout=3600)

    wf = durable(ship)
    queue.send_event("paid", key="o-1", payload=42, backend=backend)
    first = wf.enqueue().job_id
    second = wf.enqueue().job_id
    run_next(engine, wf)
    run_next(engine, wf)
    assert row(engine, first)["result"] == 42
    assert row(engine, second)["state"] == "pending"  # parked: the one event was taken


def test_an_event_sent_inside_a_rolled_back_transaction_is_never_delivered(
    backend: str, engine: Backend, durable: Callable[..., JobDefinition]
) -> None:
    def ship(payload: Any) -> Any:
        return current_job().wait_for_event("paid", key="o-2", timeout=3600)

    wf = durable(ship)
    job_id = wf.enqueue().job_id
    run_next(engine, wf)
    with pytest.raises(RuntimeError), transaction.atomic(using=engine.effects_database):
        queue.send_event("paid", key="o-2", payload="never", backend=backend)
        raise RuntimeError("the view failed")
    assert engine.claim([wf.queue], 10, 30) == []
    assert workflow_ops.wake_due(engine.effects_database, engine.now()).events == 0
    assert row(engine, job_id)["state"] == "pending"


@pytest.mark.requires("supports_time_travel")
def test_a_wait_past_its_timeout_raises_WaitTimeout_which_the_handler_can_catch(
    backend: str, engine: Backend, durable: Callable[..., JobDefinition]
) -> None:
    def ship(payload: Any) -> Any:
        ctx = current_job()
        try:
            ctx.wait_for_event("carrier.picked_up", key="o-3", timeout=60)
        except WaitTimeout as exc:
            return ctx.step("escalate", counted, "escalate", str(exc.code))
        return "shipped"

    wf = durable(ship)
    job_id = wf.enqueue().job_id
    t = later(engine, 0)
    run_next(engine, wf, t)
    run_next(engine, wf, later(engine, 61, t))
    assert row(engine, job_id)["result"] == "WAIT_TIMEOUT"
    wait = queue.workflow_steps(job_id, backend)[0]
    assert wait.status == "timed_out" and "no event 'carrier.picked_up'" in wait.error


def test_a_child_step_answers_the_childs_result_and_a_failed_child_raises_ChildFailed(
    backend: str,
    engine: Backend,
    register: Any,
    durable: Callable[..., JobDefinition],
) -> None:
    def label(payload: dict[str, Any]) -> str:
        if payload.get("fail"):
            raise RuntimeError("printer jammed")
        return f"label-{payload['n']}"

    child = register(label, backend=backend, max_attempts=1)

    def pack(payload: Any) -> Any:
        ctx = current_job()
        got = ctx.child("label", child, {"n": 1})
        try:
            ctx.child("label", child, {"n": 2, "fail": True})
        except ChildFailed as exc:
            return [got, exc.state]
        return [got, "no failure"]

    wf = durable(pack)
    job_id = wf.enqueue().job_id
    run_next(engine, wf)  # enqueues the first child and parks
    run_next(engine, child)
    assert workflow_ops.wake_due(engine.effects_database, engine.now()).children == 1
    run_next(engine, wf)  # takes the result, enqueues the second child, parks
    run_next(engine, child)
    assert workflow_ops.wake_due(engine.effects_database, engine.now()).children == 1
    run_next(engine, wf)
    assert row(engine, job_id)["result"] == ["label-1", "failed"]
    kids = [v for v in queue.workflow_steps(job_id, backend) if v.kind == "child"]
    assert [k.status for k in kids] == ["done", "raised"]
    assert row(engine, kids[0].child_id)["origin"]["parent_job"] == job_id


def test_a_rerun_from_step_n_keeps_the_steps_before_it_and_runs_the_rest_again(
    backend: str, engine: Backend, durable: Callable[..., JobDefinition]
) -> None:
    def four(payload: Any) -> list[Any]:
        ctx = current_job()
        return [ctx.step(f"s{i}", counted, f"s{i}") for i in range(1, 5)]

    wf = durable(four)
    job_id = wf.enqueue().job_id
    run_next(engine, wf)
    with capture_events() as events:
        again = queue.rerun_workflow(job_id, 3, backend=backend, user="alice")
    run_next(engine, wf)
    assert row(engine, again.job_id)["state"] == "done"
    assert calls == {"s1": 1, "s2": 1, "s3": 2, "s4": 2}
    [audited] = events.of(workflow_ops.WORKFLOW_RERUN)
    assert (audited.user, audited.job_id, audited.data["rerun_of"]) == (
        "alice",
        again.job_id,
        job_id,
    )
    assert [v.attempt for v in queue.workflow_steps(again.job_id, backend)] == [1, 1, 1, 1]
    assert len(queue.workflow_steps(job_id, backend)) == 4  # the original keeps its history


def test_retention_forgets_the_steps_of_a_pruned_workflow_and_keeps_the_others(
    backend: str, engine: Backend, durable: Callable[..., JobDefinition]
) -> None:
    def two(payload: Any) -> Any:
        ctx = current_job()
        ctx.step("a", counted, "a")
        if payload == "park":
            ctx.sleep(86400)
        return ctx.step("b", counted, "b")

    wf = durable(two)
    done = wf.enqueue("done").job_id
    parked = wf.enqueue("park").job_id
    t = later(engine, 0)
    run_next(engine, wf, t)
    run_next(engine, wf, t)
    assert (
        engine.prune(
            done_before=later(engine, 3600, t), cancelled_before=None, failed_before=None, limit=100
        ).jobs
        == 1
    )
    before = later(engine, 3600, t)
    first, second = sorted([done, parked])  # a pass looks at a batch of jobs by id
    deleted, cursor = workflow_ops.forget_pruned(engine, before, batch=1)
    assert cursor == first
    more, cursor = workflow_ops.forget_pruned(engine, before, cursor, batch=1)
    assert (cursor, deleted + more) == (second, 2)
    assert workflow_ops.forget_pruned(engine, before, cursor, batch=1) == (0, "")
    assert queue.workflow_steps(done, backend) == []
    assert [v.name for v in queue.workflow_steps(parked, backend)] == ["a", "sleep"]


def test_bad_input_to_the_workflow_verbs_is_refused_and_writes_nothing(
    backend: str, engine: Backend, durable: Callable[..., JobDefinition], register: Any
) -> None:
    with pytest.raises(QueueError) as bad:
        queue.send_event("paid", key="o-1", payload=object(), backend=backend)
    assert bad.value.code == ErrorCode.BAD_PAYLOAD
    assert workflow_ops.wake_due(engine.effects_database, engine.now()).events == 0
    plain = register(counted, backend=backend)
    job_id = plain.enqueue("x").job_id
    run_next(engine, plain)
    with pytest.raises(QueueError) as not_durable:
        queue.rerun_workflow(job_id, 1, backend=backend)
    assert not_durable.value.code == ErrorCode.NOT_A_WORKFLOW

    def outside(payload: Any) -> Any:
        return current_job().step("x", counted, "x")

    refused = register(outside, backend=backend, max_attempts=1)
    refused_id = refused.enqueue().job_id
    run_next(engine, refused)
    assert "INVALID_HANDLER" in row(engine, refused_id)["error"]
    assert NonDeterministicWorkflow.__mro__[1] is QueueError
