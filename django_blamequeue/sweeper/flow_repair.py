"""The flow sweeper: repairs what the push path of parent/child flows missed (SPEC §4)."""

from __future__ import annotations

from datetime import datetime

from ..backends.base import Backend


class FlowRepair:
    def __init__(self, backend: Backend, *, period: float = 30.0, batch: int = 500) -> None:
        self.backend = backend
        self.period = period
        self.batch = batch
        self.name = f"flow_repair[{backend.alias}]"

    def run_once(self, now: datetime | None = None) -> dict[str, int]:
        assert self.backend.resilience is not None
        result = self.backend.resilience.call(lambda: self.backend.repair_flows(now, self.batch))
        return {k: v for k, v in result.items() if v}
