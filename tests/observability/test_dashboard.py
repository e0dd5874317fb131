"""The Grafana dashboard in docs/ queries only metrics that ``metrics`` exports."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
GAUGES = {"blamequeue_queue_jobs", "blamequeue_queue_oldest_pending_seconds"}


def test_every_dashboard_query_names_an_exported_metric(metrics: Any) -> None:
    fields = dataclasses.fields(metrics._m)
    families = {getattr(metrics._m, f.name).describe()[0].name for f in fields}
    suffixes = ("", "_total", "_bucket", "_count", "_sum")
    exported = {f + s for f in families for s in suffixes} | GAUGES
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for q in queries for m in re.findall(r"blamequeue_\w+", q)}
    assert used and used <= exported, used - exported
    assert used >= GAUGES
