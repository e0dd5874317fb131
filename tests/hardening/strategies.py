"""Hypothesis strategies for the fuzz suite: arguments a careless or hostile caller passes.

Each argument comes from a *good* strategy (what the contract accepts) or from *anything*
(wrong types, NUL, lone surrogates, NaN, values past every bound). A case remembers whether
it drew only good values: then the call must succeed, not just "succeed or refuse".
"""

from __future__ import annotations

import functools
import math
import string
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

from django_blamequeue.core.validation import MAX_INT, MAX_SECONDS


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of ``choices``, each as often as its weight says (``st.one_of`` does not weigh)."""
    return st.sampled_from([c for n, c in choices for _ in range(n)]).flatmap(lambda c: c)


SAFE = string.ascii_letters + string.digits + "-_.:/ "
#: Strings that break things: NUL, lone surrogates, blank, one past each column length.
NASTY = ["", " ", "\x00", "a\x00b", "\ud800", "q\udcff", "x" * 65, "x" * 101, "x" * 201, "x" * 256]

good_text = st.text(st.sampled_from(SAFE), min_size=1, max_size=40).filter(str.strip)
any_text = st.one_of(
    st.text(max_size=30),
    st.text(st.characters(exclude_categories=()), max_size=10),  # surrogates and controls
    st.sampled_from(NASTY),
    st.text(st.sampled_from("ab\x00"), min_size=190, max_size=300),
)
anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**31 - 2, max_value=2**64),
    st.floats(),
    any_text,
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=2),
    st.timedeltas(),
)

#: JSON-like values: finite and non-finite floats, big ints, NUL and surrogates in strings.
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(),
    st.text(st.characters(exclude_categories=()), max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=16,
)
finite_json = st.recursive(
    json_scalars.filter(lambda v: not isinstance(v, float) or math.isfinite(v)),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=16,
)

zones = st.builds(lambda m: timezone(timedelta(minutes=m)), st.integers(-23 * 60, 23 * 60))
good_run_at = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(2099, 12, 31), timezones=zones
)
any_run_at = st.one_of(
    st.datetimes(timezones=st.none() | zones),
    st.sampled_from([datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)]),
    anything,
)
good_delay = st.one_of(
    st.none(),
    st.floats(min_value=0, max_value=MAX_SECONDS),
    st.integers(min_value=0, max_value=MAX_SECONDS),
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(seconds=MAX_SECONDS)),
)

GOOD: dict[str, st.SearchStrategy[Any]] = {
    "delay": good_delay,
    "run_at": st.none() | good_run_at,
    "priority": st.integers(min_value=-MAX_INT, max_value=MAX_INT),
    "max_attempts": st.none() | st.integers(min_value=1, max_value=MAX_INT),
    "classification": st.none() | good_text,
    "trace_id": st.none() | good_text.map(lambda t: t[:64]),
    "dedupe_key": st.none() | good_text,
}
ANY: dict[str, st.SearchStrategy[Any]] = {
    "delay": st.one_of(anything, st.floats(min_value=MAX_SECONDS), st.timedeltas()),
    "run_at": any_run_at,
    "priority": anything,
    "max_attempts": anything,
    "classification": st.none() | any_text | anything,
    "trace_id": st.none() | any_text | anything,
    "dedupe_key": st.none() | any_text | anything,
}


def has_non_finite(value: Any) -> bool:
    """Independent of the package: does ``value`` hold NaN or ±Infinity anywhere?"""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list):
        return any(has_non_finite(v) for v in value)
    if isinstance(value, dict):
        return any(has_non_finite(v) for v in value.values())
    return False


def nest(value: Any, depth: int) -> Any:
    return functools.reduce(lambda inner, _: [inner], range(depth), value)


@dataclass
class Case:
    """One drawn call: its arguments, and whether every one of them came from GOOD."""

    args: dict[str, Any] = field(default_factory=dict)
    good: bool = True


@st.composite
def call_options(draw: st.DrawFn, names: tuple[str, ...] = tuple(GOOD)) -> Case:
    """Keyword arguments of an enqueue: each omitted, good, or (in half the cases) anything."""
    case = Case()
    mixed = draw(st.sampled_from(["good", "mixed"])) == "mixed"
    hows = ["omit", "good", "good", "any"] if mixed else ["omit", "good"]
    for name in names:
        how = draw(st.sampled_from(hows))
        if how == "omit":
            continue
        case.args[name] = draw(GOOD[name] if how == "good" else ANY[name])
        case.good &= how == "good"
    return case


@st.composite
def queue_names(draw: st.DrawFn) -> tuple[Any, bool]:
    if draw(st.sampled_from(["good", "good", "any"])) == "good":
        return draw(good_text.map(lambda t: t[:200])), True
    return draw(st.one_of(any_text, anything)), False


@st.composite
def flow_specs(draw: st.DrawFn) -> tuple[list[Any], bool]:
    """A flow's children: a valid DAG (deps point to earlier nodes) or anything near one."""
    size = draw(st.integers(min_value=1, max_value=6))
    if (
        draw(st.sampled_from(["valid", "any"])) == "valid"
    ):  # unless an option is drawn from anything
        valid = True
        children: list[Any] = []
        for i in range(size):
            child: dict[str, Any] = {"name": f"n{i}", "payload": draw(finite_json)}
            if i:
                child["depends_on"] = draw(
                    st.lists(st.sampled_from([f"n{j}" for j in range(i)]), unique=True, max_size=3)
                )
            options = draw(call_options(("priority", "max_attempts", "delay")))
            child.update(options.args)
            valid &= options.good
            children.append(child)
        return children, valid
    names = st.one_of(st.sampled_from(["a", "b", "c", "d"]), any_text, anything)
    children = []
    for _ in range(size):
        child = draw(
            st.dictionaries(
                st.sampled_from(["payload", "priority", "delay", "job", "bogus"]),
                anything,
                max_size=2,
            )
        )
        if draw(st.integers(0, 9)):
            child["name"] = draw(names)
        if draw(st.booleans()):
            child["depends_on"] = draw(st.one_of(st.lists(names, max_size=3), anything))
        children.append(child)
    shape = draw(st.sampled_from(["list", "list", "list", "empty", "not a list"]))
    if shape == "empty":
        return [], False
    if shape == "not a list":
        return draw(anything), False  # type: ignore[return-value]
    return children, False
