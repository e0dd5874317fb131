"""Flow test fixtures: throwaway jobs and flows, a relay that only runs when a test says so."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from django_blamequeue import Child, flow, job
from django_blamequeue.context import current_job
from django_blamequeue.exceptions import JobInterrupted
from django_blamequeue.jobs import registry

#: What the handlers did, in order; cleared per test.
CALLS: dict[str, list[Any]] = {"fan_out": [], "collect": [], "page": [], "spin": []}


@pytest.fixture
def quiet_relay(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No nudge thread: outbox rows and queued settles stay until the test runs the relay
    itself; settles a test left queued never reach the next test's relay."""
    from django_blamequeue.relay import outbox

    monkeypatch.setattr(outbox, "nudge", lambda **_: None)
    yield
    outbox._to_settle.clear()


def _children(payload: dict[str, Any]) -> list[Child]:
    """``pages`` pages (``broken`` ones fail), or an explicit ``children`` list."""
    if "children" in payload:
        return [
            Child(
                c["job"],
                c.get("payload"),
                key=c["key"],
                priority=c.get("priority", 0),
                backend=c.get("backend"),
                about=c.get("about"),
            )
            for c in payload["children"]
        ]
    return [
        Child(
            "tests.flows.page",
            {"page": i, "fail": i in payload.get("broken", [])},
            key=f"p{i}",
            backend=payload.get("child_backend"),
        )
        for i in range(payload["pages"])
    ]


def _register() -> SimpleNamespace:
    @job(queue="pages", name="tests.flows.page", max_attempts=1)
    def page(payload: dict[str, Any]) -> dict[str, Any]:
        CALLS["page"].append(payload["page"])
        if payload.get("fail"):
            raise ValueError(f"page {payload['page']} is broken")
        return {"page": payload["page"], "words": 10 * payload["page"]}

    @job(queue="slow", name="tests.flows.spin", max_attempts=1)
    def spin(payload: Any) -> None:
        """Runs until interrupted; records what it saw when the interrupt landed."""
        ctx = current_job()
        CALLS["spin"].append(("started", ctx.job_id))
        try:
            while True:
                sum(range(100))
        except JobInterrupted as exc:
            CALLS["spin"].append((type(exc).__name__, ctx.cancelled))
            raise

    def report(mode: str) -> Any:
        @flow(queue="reports", on_child_failure=mode, name=f"tests.flows.Report.{mode}")  # type: ignore[arg-type]
        class Report:
            def fan_out(self, payload: dict[str, Any]) -> list[Child]:
                CALLS["fan_out"].append(current_job().job_id)
                return _children(payload)

            def collect(self, payload: dict[str, Any], state: Any) -> dict[str, Any]:
                CALLS["collect"].append((current_job().job_id, state))
                return {
                    "pages": len(state.results),
                    "words": sum(r["words"] for r in state.results.values() if r),
                    "failed": sorted(state.errors),
                }

        return Report

    @flow(queue="reports", name="tests.flows.Book")
    class Book:
        """A flow of flows: each chapter is a Report of its own pages."""

        def fan_out(self, payload: dict[str, Any]) -> list[Child]:
            CALLS["fan_out"].append(current_job().job_id)
            return [
                Child(Report, {"pages": n}, key=f"c{i}") for i, n in enumerate(payload["chapters"])
            ]

        def collect(self, payload: dict[str, Any], state: Any) -> dict[str, Any]:
            CALLS["collect"].append((current_job().job_id, state))
            return {"chapters": dict(state.results), "errors": dict(state.errors)}

    Report = report("fail")
    return SimpleNamespace(
        page=page, spin=spin, Report=Report, Continue=report("continue"), Book=Book
    )


@pytest.fixture
def jobs() -> Iterator[SimpleNamespace]:
    for calls in CALLS.values():
        calls.clear()
    yield _register()
    for name in list(registry.registered()):
        if name.startswith("tests.flows."):
            registry.unregister(name)


def collects() -> list[Any]:
    """The ``FlowState`` each collect saw, in order."""
    return [state for _, state in CALLS["collect"]]
