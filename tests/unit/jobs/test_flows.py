"""jobs/flows: what ``@flow`` and ``Child`` refuse, and with which ``ErrorCode``, and the
children a fan-out becomes (``build_children``): ids derived from the parent and the key,
flow fields filled in, every refusal raised before anything is stored."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from django_blamequeue import job
from django_blamequeue.core import ids
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import Claimed, FlowState
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs import registry
from django_blamequeue.jobs.flows import Child, FlowSpec, build_children, flow
from django_blamequeue.jobs.registry import JobDefinition
from django_blamequeue.serializers import decode

_n = itertools.count()


@pytest.fixture
def names() -> Iterator[Callable[[str], str]]:
    """``names("Report")``: a job name unique to this test, unregistered afterwards."""
    made: list[str] = []

    def name(stem: str) -> str:
        made.append(f"tests.unit.flows.{stem}.{next(_n)}")
        return made[-1]

    yield name
    for n in made:
        registry.unregister(n)


def refused(call: Callable[[], Any]) -> QueueError:
    with pytest.raises(QueueError) as caught:
        call()
    return caught.value


def page_job(names: Callable[[str], str], **options: Any) -> JobDefinition:
    def page(payload: Any) -> Any:
        return payload

    return job(queue="pages", name=names("page"), **options)(page)


def flow_of(names: Callable[[str], str], fan_out: Callable[[Any], Any], **options: Any) -> Any:
    class Report:
        def fan_out(self, payload: Any) -> Any:
            return fan_out(payload)

        def collect(self, payload: Any, state: FlowState) -> Any:
            return state.total

    return flow(queue="reports", name=names("Report"), **options)(Report)


def parent(flow_cls: Any, *, depth: int = 0, flow_id: str | None = None) -> Claimed:
    """The flow's parent as a worker claimed it."""
    return Claimed(
        job_id=ids.new_id(),
        queue="reports",
        name=flow_cls.definition.name,
        payload=Encoded("application/json", "utf-8", b"null"),
        token="t",
        attempt=1,
        max_attempts=3,
        lease_expires_at=datetime.now(UTC),
        trace_id="trace-1",
        flow_id=flow_id,
        flow_depth=depth,
    )


def children_of(flow_cls: Any, claimed: Claimed, payload: Any = None, max_depth: int = 5) -> Any:
    return build_children(flow_cls.definition.flow, claimed, payload, "default", max_depth)


# -- @flow -----------------------------------------------------------------------------------
def test_on_child_failure_is_fail_or_continue() -> None:
    mode: Any = "ignore"
    exc = refused(lambda: flow(on_child_failure=mode))
    assert exc.code == ErrorCode.BAD_FLOW
    assert exc.message == 'on_child_failure must be "fail" or "continue"'


@pytest.mark.parametrize("missing", ["fan_out", "collect"])
def test_a_flow_class_needs_fan_out_and_collect(missing: str, names: Callable[[str], str]) -> None:
    methods = {m: (lambda self, *args: None) for m in ("fan_out", "collect") if m != missing}
    cls = type("Incomplete", (), methods)
    exc = refused(lambda: flow(name=names("Incomplete"))(cls))
    assert exc.code == ErrorCode.INVALID_HANDLER
    assert exc.message == f"@flow class Incomplete needs {missing}()"


def test_a_flow_class_is_registered_with_its_options_and_gets_enqueue(
    names: Callable[[str], str],
) -> None:
    report = flow_of(names, lambda p: [], on_child_failure="continue", max_attempts=7)
    definition = report.definition
    assert registry.get(definition.name) is definition
    assert (definition.queue, definition.options.max_attempts) == ("reports", 7)
    assert isinstance(definition.flow, FlowSpec)
    assert (definition.flow.cls, definition.flow.on_child_failure) == (report, "continue")
    assert report.enqueue == definition.enqueue


def test_a_flow_cannot_be_called_directly_only_through_the_queue(
    names: Callable[[str], str],
) -> None:
    report = flow_of(names, lambda p: [])
    exc = refused(lambda: report.definition({"pages": 1}))
    assert exc.code == ErrorCode.INVALID_HANDLER
    assert exc.message == "a flow runs through the queue"


# -- Child -----------------------------------------------------------------------------------
def test_a_child_names_its_job_by_name_definition_or_flow_class(
    names: Callable[[str], str],
) -> None:
    page = page_job(names)
    report = flow_of(names, lambda p: [])
    assert Child("any.registered.name").job_name == "any.registered.name"
    assert (Child(page).job_name, Child(page).queue) == (page.name, "pages")
    assert (Child(report).job_name, Child(report).queue) == (report.definition.name, "reports")
    assert Child("by.name").queue is None  # the definition's, looked up when built


@pytest.mark.parametrize("not_a_job", [print, 42, None, object()])
def test_a_child_of_something_not_registered_is_a_bad_flow(not_a_job: Any) -> None:
    assert refused(lambda: Child(not_a_job).job_name).code == ErrorCode.BAD_FLOW


@pytest.mark.parametrize("answer", [None, "p1", {"p1": 1}, [Child("x"), "not a child"], Child("x")])
def test_fan_out_must_answer_a_list_of_child(answer: Any, names: Callable[[str], str]) -> None:
    report = flow_of(names, lambda p: answer)
    exc = refused(lambda: report.definition.flow.fan_out(None))
    assert exc.code == ErrorCode.BAD_FLOW
    assert exc.message == "Report.fan_out must return a list of Child"


# -- build_children --------------------------------------------------------------------------
def test_children_get_ids_from_the_parent_and_their_key_so_a_repeat_dedups(
    names: Callable[[str], str],
) -> None:
    page = page_job(names)
    report = flow_of(names, lambda p: [Child(page, {"n": 0}, key="first"), Child(page, {"n": 1})])
    claimed = parent(report)
    built = children_of(report, claimed)
    assert [c.key for c in built] == ["first", "1"]  # an index where no key was given
    assert [c.job.job_id for c in built] == [
        ids.child_id(claimed.job_id, "first"),
        ids.child_id(claimed.job_id, "1"),
    ]
    again = children_of(report, claimed)
    assert [c.job.job_id for c in again] == [c.job.job_id for c in built]


def test_a_child_carries_its_place_in_the_flow(names: Callable[[str], str]) -> None:
    page = page_job(names, max_attempts=2)
    report = flow_of(names, lambda p: [Child(page, {"n": p}, key="k", priority=5)])
    claimed = parent(report, depth=1, flow_id="ROOTFLOWID")
    (child,) = children_of(report, claimed, payload=3)
    new = child.job
    assert child.backend == "default"
    assert (new.queue, new.name, new.priority, new.max_attempts) == ("pages", page.name, 5, 2)
    assert (new.flow_id, new.parent_id, new.flow_key) == ("ROOTFLOWID", claimed.job_id, "k")
    assert (new.parent_backend, new.flow_depth, new.trace_id) == ("default", 2, "trace-1")
    assert decode(new.payload.content_type, new.payload.content_encoding, new.payload.body) == {
        "n": 3
    }


def test_the_first_parent_is_its_flows_id(names: Callable[[str], str]) -> None:
    page = page_job(names)
    report = flow_of(names, lambda p: [Child(page)])
    claimed = parent(report)
    (child,) = children_of(report, claimed)
    assert child.job.flow_id == claimed.job_id


@pytest.mark.parametrize("keys", [["a", "a"], ["a", ""], ["a", 7]])
def test_child_keys_must_be_unique_non_empty_strings(
    keys: list[Any], names: Callable[[str], str]
) -> None:
    page = page_job(names)
    report = flow_of(names, lambda p: [Child(page, key=k) for k in keys])
    exc = refused(lambda: children_of(report, parent(report)))
    assert exc.code == ErrorCode.BAD_FLOW
    assert exc.message.startswith("child keys must be unique non-empty strings")


def test_a_child_job_nobody_registered_is_unknown(names: Callable[[str], str]) -> None:
    report = flow_of(names, lambda p: [Child("tests.unit.flows.nobody")])
    exc = refused(lambda: children_of(report, parent(report)))
    assert exc.code == ErrorCode.UNKNOWN_JOB
    assert exc.message == "child job 'tests.unit.flows.nobody' is not registered"


def test_a_child_on_a_backend_not_configured_is_refused(names: Callable[[str], str]) -> None:
    page = page_job(names)
    report = flow_of(names, lambda p: [Child(page, backend="nowhere")])
    assert refused(lambda: children_of(report, parent(report))).code == (ErrorCode.UNKNOWN_BACKEND)


def test_a_fan_out_past_the_maximum_depth_is_refused_but_an_empty_one_is_not(
    names: Callable[[str], str],
) -> None:
    page = page_job(names)
    report = flow_of(names, lambda p: [Child(page)] if p else [])
    deep = parent(report, depth=2)
    exc = refused(lambda: children_of(report, deep, payload=True, max_depth=2))
    assert exc.code == ErrorCode.BAD_FLOW
    assert exc.message == ("flow depth 3 is past MAX_FLOW_DEPTH=2 (nested flows too deep)")
    assert children_of(report, deep, payload=False, max_depth=2) == ()
    assert len(children_of(report, parent(report, depth=1), payload=True, max_depth=2)) == 1


def test_a_child_s_expires_overrides_its_job_s_own(names: Callable[[str], str]) -> None:
    page = page_job(names, expires=600)
    report = flow_of(names, lambda p: [Child(page, key="own"), Child(page, key="soon", expires=30)])
    own, soon = children_of(report, parent(report))
    assert (own.job.expires, soon.job.expires) == (600, 30)
