"""Jobs and flows of the parent/child conformance tests, registered per test (``flows``)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from django_blamequeue import Child, current_job, flow, job
from django_blamequeue.jobs import registry

PREFIX = "tests.conformance.flows."
#: What the handlers did, in order; cleared per test.
CALLS: dict[str, list[Any]] = {"fan_out": [], "collect": [], "page": []}


def _pages(payload: dict[str, Any]) -> list[Child]:
    children = [
        Child(
            PREFIX + "page",
            {"page": i, "fail": i in payload.get("broken", [])},
            key=f"p{i}",
            backend=payload.get("child_backend"),
        )
        for i in range(payload.get("pages", 0))
    ]
    children += [
        Child(PREFIX + "hold", {}, key=f"h{i}", backend=payload.get("child_backend"))
        for i in range(payload.get("holds", 0))
    ]
    return children


def register() -> SimpleNamespace:
    for calls in CALLS.values():
        calls.clear()

    @job(queue="pages", name=PREFIX + "page", max_attempts=1)
    def page(payload: dict[str, Any]) -> dict[str, Any]:
        CALLS["page"].append(payload["page"])
        if payload.get("fail"):
            raise ValueError(f"page {payload['page']} is broken")
        return {"page": payload["page"], "words": 10 * payload["page"]}

    @job(queue="pages", name=PREFIX + "hold", max_attempts=1)
    def hold(payload: Any) -> None:
        """Runs until cancelled (or 30 s): a child still in flight when its flow settles."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not current_job().cancelled:
            time.sleep(0.01)

    def report(mode: str) -> Any:
        @flow(queue="reports", on_child_failure=mode, name=f"{PREFIX}Report.{mode}")  # type: ignore[arg-type]
        class Report:
            def fan_out(self, payload: dict[str, Any]) -> list[Child]:
                CALLS["fan_out"].append(current_job().job_id)
                return _pages(payload)

            def collect(self, payload: dict[str, Any], state: Any) -> dict[str, Any]:
                CALLS["collect"].append((current_job().job_id, state))
                return {
                    "pages": len(state.results),
                    "words": sum(r["words"] for r in state.results.values() if r),
                    "failed": sorted(state.errors),
                    "cancelled": state.cancelled,
                }

        return Report

    Report = report("fail")

    @flow(queue="reports", name=PREFIX + "Book")
    class Book:
        """A flow of flows: each chapter is a Report of its own pages."""

        def fan_out(self, payload: dict[str, Any]) -> list[Child]:
            CALLS["fan_out"].append(current_job().job_id)
            return [
                Child(Report, {"pages": n}, key=f"c{i}") for i, n in enumerate(payload["chapters"])
            ]

        def collect(self, payload: dict[str, Any], state: Any) -> dict[str, Any]:
            CALLS["collect"].append((current_job().job_id, state))
            return {"chapters": {k: v["words"] for k, v in state.results.items()}}

    return SimpleNamespace(
        page=page, hold=hold, Report=Report, Continue=report("continue"), Book=Book
    )


def unregister() -> None:
    for name in list(registry.registered()):
        if name.startswith(PREFIX):
            registry.unregister(name)
