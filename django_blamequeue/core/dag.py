"""DAG validation for ``enqueue_flow``: names, dependencies and cycles (docs/flows.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django_blamequeue.core.validation import MAX_KEY, shown, storable
from django_blamequeue.exceptions import ErrorCode, QueueError

#: The job options an ``enqueue_flow`` child may give (``JobOptions``' names).
DAG_OPTIONS = frozenset(
    {
        "priority",
        "classification",
        "trace_id",
        "max_attempts",
        "dedupe_key",
        "delay",
        "about",
        "expires",
    }
)
CHILD_KEYS = frozenset({"name", "job", "payload", "depends_on"}) | DAG_OPTIONS
#: A cycle's message spells at most this many names: the first ones, "…", the last ones.
CYCLE_SHOWN = 12


def validate_dag(children: Sequence[Mapping[str, Any]]) -> list[str]:
    """Check a flow's children; answer a topological order of their names.

    Raises ``BAD_FLOW`` (shape), ``FLOW_UNKNOWN_DEP`` or ``FLOW_CYCLE`` (with the path).
    """
    if not isinstance(children, Sequence) or isinstance(children, str | bytes) or not children:
        raise QueueError(ErrorCode.BAD_FLOW, "a flow needs a non-empty list of children")
    deps: dict[str, list[str]] = {}
    for index, child in enumerate(children):
        if not isinstance(child, Mapping):
            raise QueueError(ErrorCode.BAD_FLOW, f"child #{index} is not a dict")
        unknown = set(child) - CHILD_KEYS
        if unknown:
            keys = ", ".join(sorted(shown(k) for k in unknown)[:5])
            raise QueueError(ErrorCode.BAD_FLOW, f"child #{index} has unknown keys: {keys}")
        name = child.get("name")
        if not isinstance(name, str) or not name.strip():
            raise QueueError(ErrorCode.BAD_FLOW, f"child #{index} needs a non-empty 'name'")
        if len(name) > MAX_KEY or not storable(name):
            raise QueueError(
                ErrorCode.BAD_FLOW,
                f"child #{index}: a name is at most {MAX_KEY} characters without NUL or a lone "
                f"surrogate, not {shown(name)}",
            )
        if name in deps:
            raise QueueError(ErrorCode.BAD_FLOW, f"child name {shown(name)} is used twice")
        depends_on = child.get("depends_on", [])
        if not isinstance(depends_on, list | tuple) or not all(
            isinstance(d, str) for d in depends_on
        ):
            raise QueueError(
                ErrorCode.BAD_FLOW,
                f"child {shown(name)}: 'depends_on' must be a list of child names",
            )
        if len(set(depends_on)) != len(depends_on):
            raise QueueError(ErrorCode.BAD_FLOW, f"child {shown(name)} lists a dependency twice")
        deps[name] = list(depends_on)
    for name, wanted in deps.items():
        for dep in wanted:
            if dep not in deps:
                raise QueueError(
                    ErrorCode.FLOW_UNKNOWN_DEP,
                    f"child {shown(name)} depends on unknown child {shown(dep)}",
                )
    return _topological(deps)


def _topological(deps: Mapping[str, list[str]]) -> list[str]:
    """Depth-first order; on a back edge, raise with the cycle spelled ``a → b → a``."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = finished
    for root in deps:
        if state.get(root) == 2:
            continue
        path: list[str] = [root]
        stack: list[tuple[str, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            node, i = stack[-1]
            if i < len(deps[node]):
                stack[-1] = (node, i + 1)
                nxt = deps[node][i]
                if state.get(nxt) == 1:
                    cycle = [*path[path.index(nxt) :], nxt]
                    raise QueueError(ErrorCode.FLOW_CYCLE, "cycle: " + spell_cycle(cycle))
                if state.get(nxt) is None:
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append((nxt, 0))
            else:
                stack.pop()
                path.pop()
                state[node] = 2
                order.append(node)
    return order


def spell_cycle(cycle: Sequence[str]) -> str:
    """``a → b → a``; a long cycle keeps its first and last names around an elision, so the
    message stays short whatever the flow's size (each name cut to 40 characters)."""
    names = [n if len(n) <= 40 else f"{n[:39]}…" for n in cycle]
    if len(names) <= CYCLE_SHOWN:
        return " → ".join(names)
    head, tail = names[: CYCLE_SHOWN // 2], names[-(CYCLE_SHOWN // 2) :]
    hidden = len(names) - len(head) - len(tail)
    return " → ".join([*head, f"… {hidden:,} more …", *tail]) + f" ({len(cycle) - 1:,} nodes)"
