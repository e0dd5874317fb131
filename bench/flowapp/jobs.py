"""One flow and its no-op child: the numbers measure fan-out, reports, settle and collect."""

from __future__ import annotations

from typing import Any

from django_blamequeue import Child, flow, job

PARENTS = "bench-flows"
CHILDREN = "bench-children"


@job(queue=CHILDREN, name="benchflows.child", max_attempts=3)
def child(payload: Any) -> None:
    return None


@flow(queue=PARENTS, name="benchflows.Fan", on_child_failure="continue")
class Fan:
    def fan_out(self, payload: dict[str, int]) -> list[Child]:
        return [Child(child, None, key=str(i)) for i in range(payload["n"])]

    def collect(self, payload: dict[str, int], state: Any) -> dict[str, int]:
        return {"completed": state.completed, "failed": state.failed}
