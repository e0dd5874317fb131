"""Parent/child flows (docs/flows.md): ``@flow`` classes with ``fan_out`` and ``collect``.

Phase 1 (``fan_out``) returns ``Child`` specs; the fan-out ack stores the manifest (one
dependency row per child) and parks the parent in ``waiting_children``. Each child's terminal
transition reports to the parent through the outbox; once no child is pending (or at the first
failure under ``"fail"``) the parent is re-pended and phase 2 (``collect``) runs, its result
the flow's result. The stored manifest decides the phase, so a re-claimed parent never fans
out twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from django_blamequeue.backends import get_backend
from django_blamequeue.core import ids
from django_blamequeue.core.options import OPTION_NAMES, JobOptions
from django_blamequeue.core.records import ChildSpec, FlowState
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs import enqueueing, origin, registry
from django_blamequeue.jobs.hooks import HOOK_NAMES, NO_HOOKS, Hook, Hooks
from django_blamequeue.jobs.registry import JobDefinition, register_definition

OnChildFailure = Literal["fail", "continue"]


@dataclass(frozen=True, slots=True)
class Child:
    """One child of a fan-out: a registered job (or flow), its payload and a unique key."""

    job: Any  # a JobDefinition / @flow class, or a registered job name
    payload: Any = None
    key: str | None = None
    priority: int = 0
    backend: str | None = None
    max_attempts: int | None = None
    about: Any = None  # the model instance the child is about (``JobInfo.about``)
    expires: float | None = None  # seconds: not started by then, it is cancelled (expired)

    @property
    def job_name(self) -> str:
        if isinstance(self.job, str):
            return self.job
        definition = getattr(self.job, "definition", self.job)
        if isinstance(definition, JobDefinition):
            return definition.name
        raise QueueError(ErrorCode.BAD_FLOW, f"Child job {self.job!r} is not a registered job")

    @property
    def queue(self) -> str | None:
        definition = getattr(self.job, "definition", self.job)
        return definition.queue if isinstance(definition, JobDefinition) else None


#: ``Child``'s fields that are job options, by their ``JobOptions`` names.
_CHILD_OPTIONS = tuple(f.name for f in fields(Child) if f.name in OPTION_NAMES)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowSpec:
    cls: type
    on_child_failure: OnChildFailure = "fail"

    def fan_out(self, payload: Any) -> list[Child]:
        children = self.cls().fan_out(payload)
        if not isinstance(children, list | tuple) or not all(
            isinstance(c, Child) for c in children
        ):
            raise QueueError(
                ErrorCode.BAD_FLOW, f"{self.cls.__name__}.fan_out must return a list of Child"
            )
        return list(children)

    def collect(self, payload: Any, state: FlowState) -> Any:
        return self.cls().collect(payload, state)


def flow(
    *,
    queue: str = "default",
    on_child_failure: OnChildFailure = "fail",
    name: str | None = None,
    max_attempts: int | None = None,
    timeout: float | None = None,
    backend: str | None = None,
    priority: int = 0,
    concurrency_key: str | Callable[[Any], str | None] | None = None,
) -> Callable[[type], type]:
    """Register a class with ``fan_out(payload)`` and ``collect(payload, state)`` as a flow
    (``concurrency_key`` as for ``@job``: the parent's key)."""
    if on_child_failure not in ("fail", "continue"):
        raise QueueError(ErrorCode.BAD_FLOW, 'on_child_failure must be "fail" or "continue"')

    def register(cls: type) -> type:
        for method in ("fan_out", "collect"):
            if not callable(getattr(cls, method, None)):
                raise QueueError(
                    ErrorCode.INVALID_HANDLER, f"@flow class {cls.__name__} needs {method}()"
                )
        spec = FlowSpec(cls=cls, on_child_failure=on_child_failure)

        def not_directly(payload: Any) -> Any:
            raise QueueError(ErrorCode.INVALID_HANDLER, "a flow runs through the queue")

        not_directly.__module__ = cls.__module__
        not_directly.__qualname__ = cls.__qualname__
        options = JobOptions(
            queue=queue,
            backend=backend,
            priority=priority,
            max_attempts=max_attempts,
            timeout=timeout,
            concurrency_key=concurrency_key,
        )
        definition = register_definition(
            not_directly, name=name, options=options, flow=spec, hooks=_hooks_of(cls)
        )
        cls.definition = definition  # type: ignore[attr-defined]
        cls.enqueue = staticmethod(definition.enqueue)  # type: ignore[attr-defined]
        return cls

    return register


def build_children(
    spec: FlowSpec, parent: Any, payload: Any, parent_backend: str, max_depth: int
) -> tuple[Any, ...]:
    """Turn ``fan_out``'s ``Child`` list into validated, encoded ``ChildSpec``s.

    Child ids are derived from the parent id and the key, so a repeated fan-out or a
    repair re-enqueue of the same child dedups to the same job.
    """
    children = spec.fan_out(payload)
    depth = parent.flow_depth + 1
    if children and depth > max_depth:
        raise QueueError(
            ErrorCode.BAD_FLOW,
            f"flow depth {depth} is past MAX_FLOW_DEPTH={max_depth} (nested flows too deep)",
        )
    seen: set[str] = set()
    built = []
    cause = {"flow": parent.flow_id or parent.job_id, "site": origin.site_of(spec.cls.fan_out)}  # type: ignore[attr-defined]
    for index, child in enumerate(children):
        key = child.key if child.key is not None else str(index)
        if not isinstance(key, str) or not key or key in seen:
            raise QueueError(
                ErrorCode.BAD_FLOW, f"child keys must be unique non-empty strings: {key!r}"
            )
        seen.add(key)
        name = child.job_name
        definition = registry.get(name)
        if definition is None:
            raise QueueError(ErrorCode.UNKNOWN_JOB, f"child job {name!r} is not registered")
        target = get_backend(child.backend or definition.backend or parent_backend)
        job = enqueueing.new_job(
            child.queue or definition.queue,
            child.payload,
            definition=definition,
            name=name,
            job_id=ids.child_id(parent.job_id, key),
            cause=cause,
            trace_id=parent.trace_id,
            # the child's options, over its job's own
            **{option: getattr(child, option) for option in _CHILD_OPTIONS},
        )
        job = replace(
            job,
            flow_id=parent.flow_id or parent.job_id,
            parent_id=parent.job_id,
            flow_key=key,
            parent_backend=parent_backend,
            flow_depth=depth,
        )
        built.append(ChildSpec(key=key, job=job, backend=target.alias))
    return tuple(built)


def _hooks_of(cls: type) -> Hooks:
    """A @flow class's ``on_success`` / ``on_retry`` / ``on_failure`` methods, each called on
    a fresh instance as ``fan_out`` and ``collect`` are (``on_failure``: Celery's
    ``link_error``, run once the flow is in the DLQ)."""
    found = {
        kind: _method_hook(cls, kind) for kind in HOOK_NAMES if callable(getattr(cls, kind, None))
    }
    return Hooks(**{kind: (hook,) for kind, hook in found.items()}) if found else NO_HOOKS


def _method_hook(cls: type, kind: str) -> Hook:
    def hook(event: Any) -> Any:
        return getattr(cls(), kind)(event)

    return hook
