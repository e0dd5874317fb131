"""DAG validation for ``enqueue_flow`` (docs/flows.md): shape, unknown dependencies, cycles."""

from __future__ import annotations

from typing import Any

import pytest

from django_blamequeue import ErrorCode, QueueError
from django_blamequeue.core.dag import validate_dag


def refused(children: Any) -> QueueError:
    with pytest.raises(QueueError) as caught:
        validate_dag(children)
    return caught.value


@pytest.mark.parametrize(
    "children",
    [
        [],
        (),
        None,
        "abc",
        {"name": "a"},
        [{"name": "a"}, "b"],
        [{"name": "a"}, None],
        [{"payload": 1}],
        [{"name": ""}],
        [{"name": "   "}],
        [{"name": 7}],
        [{"name": "a"}, {"name": "a"}],
        [{"name": "a", "depends_on": "b"}, {"name": "b"}],
        [{"name": "a", "depends_on": [1]}],
        [{"name": "a", "depends_on": {"b": 1}}, {"name": "b"}],
        [{"name": "a", "depends_on": ["b", "b"]}, {"name": "b"}],
        [{"name": "a", "colour": "red"}],
    ],
    ids=[
        "empty-list",
        "empty-tuple",
        "none",
        "string",
        "one-dict",
        "child-not-a-dict",
        "child-none",
        "no-name",
        "empty-name",
        "blank-name",
        "name-not-a-string",
        "duplicate-name",
        "depends-on-a-string",
        "depends-on-non-strings",
        "depends-on-a-dict",
        "dependency-listed-twice",
        "unknown-key",
    ],
)
def test_bad_shapes_are_refused_as_bad_flow(children: Any) -> None:
    assert refused(children).code == ErrorCode.BAD_FLOW


def test_an_unknown_key_is_named() -> None:
    assert "colour" in refused([{"name": "a", "colour": "red"}]).message


def test_a_dependency_on_an_unknown_name_is_flow_unknown_dep_naming_both() -> None:
    err = refused([{"name": "a"}, {"name": "b", "depends_on": ["a", "ghost"]}])
    assert err.code == ErrorCode.FLOW_UNKNOWN_DEP
    assert "'b'" in err.message and "'ghost'" in err.message


def test_a_two_node_cycle_shows_its_path() -> None:
    err = refused([{"name": "a", "depends_on": ["b"]}, {"name": "b", "depends_on": ["a"]}])
    assert err.code == ErrorCode.FLOW_CYCLE
    assert "a → b → a" in err.message


def test_a_self_dependency_is_a_cycle() -> None:
    err = refused([{"name": "a", "depends_on": ["a"]}])
    assert err.code == ErrorCode.FLOW_CYCLE
    assert "a → a" in err.message


def test_a_longer_cycle_shows_only_the_cycle_not_the_path_into_it() -> None:
    err = refused(
        [
            {"name": "start", "depends_on": ["x"]},
            {"name": "x", "depends_on": ["y"]},
            {"name": "y", "depends_on": ["z"]},
            {"name": "z", "depends_on": ["x"]},
        ]
    )
    assert err.code == ErrorCode.FLOW_CYCLE
    assert err.message.endswith("x → y → z → x")
    assert "start" not in err.message


def test_a_valid_dag_answers_a_topological_order() -> None:
    order = validate_dag(
        [
            {"name": "d", "depends_on": ["b", "c"]},
            {"name": "b", "depends_on": ["a"]},
            {"name": "c", "depends_on": ["a"]},
            {"name": "a"},
        ]
    )
    assert sorted(order) == ["a", "b", "c", "d"]
    assert order.index("a") < order.index("b") < order.index("d")
    assert order.index("a") < order.index("c") < order.index("d")


def test_every_documented_child_key_is_accepted() -> None:
    validate_dag(
        [
            {
                "name": "a",
                "job": "x.y",
                "payload": {},
                "priority": 1,
                "classification": "c",
                "trace_id": "t",
                "max_attempts": 2,
            },
            {"name": "b", "depends_on": ["a"]},
        ]
    )
