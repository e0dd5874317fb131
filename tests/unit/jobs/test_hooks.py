"""Without a worker: what ``@job`` makes of hooks and class-based jobs, which applied acks
notify, and the refusals (``INVALID_HANDLER``) before anything is registered."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_blamequeue import BaseJob, JobEvent, QueueError, flow, job
from django_blamequeue.core.records import AckResult, Transition
from django_blamequeue.core.states import Reason, State
from django_blamequeue.exceptions import ErrorCode
from django_blamequeue.jobs import events, registry
from django_blamequeue.worker.notify import kind_of


@pytest.fixture
def names() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        registry.unregister(name)


class Reporting(BaseJob):
    def on_failure(self, event: JobEvent) -> None:
        pass


def test_a_base_classs_overridden_hooks_run_before_the_decorators(names: list[str]) -> None:
    def alert(event: JobEvent) -> None:
        pass

    @job(queue="hooks", name="tests.unit.hooked", base=Reporting, on_failure=alert)
    def hooked(n: int) -> int:
        return n + 1

    names.append(hooked.name)
    first, second = hooked.hooks.on_failure
    assert getattr(first, "__func__", None) is Reporting.on_failure and second is alert
    assert hooked.hooks.on_success == () and hooked.hooks.on_retry == ()
    assert hooked(1) == 2
    assert isinstance(hooked.func, Reporting) and hooked.func.run.__name__ == "hooked"


def test_a_class_job_is_named_by_its_class_and_runs_its_run(names: list[str]) -> None:
    @job(queue="hooks")
    class Export(BaseJob):
        def run(self, fmt: str = "csv") -> str:
            return f"exported as {fmt}"

    names.append(Export.name)
    here = "test_a_class_job_is_named_by_its_class_and_runs_its_run"
    assert Export.name == f"{__name__}.{here}.<locals>.Export"
    assert Export(fmt="xlsx") == "exported as xlsx"
    assert not Export.hooks  # nothing overridden


def test_a_flows_hook_methods_are_its_hooks(names: list[str]) -> None:
    @flow(queue="hooks", name="tests.unit.flow_hooks")
    class Chord:
        def fan_out(self, payload: Any) -> list[Any]:
            return []

        def collect(self, payload: Any, state: Any) -> None:
            return None

        def on_failure(self, event: JobEvent) -> None:
            pass

    names.append("tests.unit.flow_hooks")
    definition = registry.get("tests.unit.flow_hooks")
    assert definition is not None and len(definition.hooks.on_failure) == 1


@pytest.mark.parametrize(
    ("options", "target", "message"),
    [
        ({"on_failure": "notify_admins"}, "function", "on_failure must be a callable(event)"),
        ({"base": dict}, "function", "base must be a BaseJob subclass"),
        ({"base": Reporting}, "class", "base= is for function jobs"),
        ({}, "plain class", "@job on a class needs a BaseJob subclass"),
    ],
)
def test_bad_hooks_and_bases_are_refused_before_anything_is_registered(
    options: dict[str, Any], target: str, message: str
) -> None:
    class Plain:
        pass

    class Sub(BaseJob):
        pass

    def function(payload: Any) -> None:
        pass

    thing = {"function": function, "class": Sub, "plain class": Plain}[target]
    before = set(registry.registered())
    with pytest.raises(QueueError) as caught:
        job(queue="hooks", name="tests.unit.refused", **options)(thing)
    assert caught.value.code == ErrorCode.INVALID_HANDLER and message in caught.value.message
    assert set(registry.registered()) == before


@pytest.mark.parametrize(
    ("transition", "state", "kind"),
    [
        (Transition(state=State.DONE), State.DONE, "succeeded"),
        (Transition(state=State.PENDING, delay=1, error="x"), State.PENDING, "retrying"),
        (Transition(state=State.PENDING, give_back_attempt=True), State.PENDING, None),
        (
            Transition(state=State.PENDING, give_back_attempt=True, snoozed=True),
            State.PENDING,
            None,
        ),
        (Transition(state=State.FAILED, reason=Reason.ERROR), State.FAILED, "failed"),
        # a cancel request won over the retry: the job is cancelled, not retrying
        (Transition(state=State.PENDING, delay=1, error="x"), State.CANCELLED, "cancelled"),
        (Transition(state=State.WAITING_CHILDREN), State.WAITING_CHILDREN, None),
    ],
)
def test_an_applied_ack_notifies_where_the_engine_says_the_job_went(
    transition: Transition, state: State, kind: str | None
) -> None:
    assert kind_of(transition, state) == kind


def test_an_ack_the_engine_refused_notifies_nothing() -> None:
    from django_blamequeue.worker.notify import Notifier

    notifier = Notifier()
    refused = AckResult(job_id="j", ok=False)
    notifier.ended(None, Transition(state=State.DONE), refused)  # type: ignore[arg-type]
    assert notifier.backlog == 0


def test_transitions_outside_a_worker_map_to_one_kind_each() -> None:
    from django_blamequeue import audit

    def kind(action: str, **data: Any) -> str | None:
        return events._kind(audit.Event(action=action, job_id="j", data=data))

    assert kind(audit.STALLED, to="failed") == "failed"
    assert kind(audit.STALLED, to="pending") == "retrying"
    assert kind(audit.STALLED, to="cancelled") == "cancelled"
    assert kind(audit.CANCEL) == "cancelled"
    assert kind(audit.CANCEL, cascade=True) == "cancelled"
    assert kind(audit.CANCEL, **{"while": "running"}) is None  # the worker's own ack
    assert kind(audit.DLQ_WRITE, reason="stalled") is None  # its STALLED event says it


def test_a_handler_without_hooks_has_none_and_methods_run_before_the_given_callables() -> None:
    from django_blamequeue.jobs.hooks import NO_HOOKS, hooks_of

    assert hooks_of(lambda payload: None, {"on_failure": None}) is NO_HOOKS
    assert not NO_HOOKS

    def given(event: JobEvent) -> None:
        pass

    handler = Reporting()
    found = hooks_of(handler, {"on_failure": given, "on_success": None})
    assert [getattr(h, "__func__", h) for h in found.of("on_failure")] == [
        Reporting.on_failure,
        given,
    ]
    assert found.of("on_success") == () and found.of("on_retry") == ()
