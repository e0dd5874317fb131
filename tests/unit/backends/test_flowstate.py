"""``state_from_rows``: what ``collect`` sees, the same from every backend's manifest rows."""

from __future__ import annotations

import json

from django_blamequeue.backends.flowstate import state_from_rows


def row(key: str, status: str, result: bytes | None = None, error: str = "") -> dict[str, object]:
    kind = "application/json" if result is not None else None
    return {"key": key, "status": status, "result": result, "result_type": kind, "error": error}


def test_each_child_is_counted_once_by_its_report_and_unreported_ones_are_pending() -> None:
    state = state_from_rows(
        [row("a", "done", b"1"), row("b", "failed", error="boom"), row("c", "cancelled"),
         row("d", "pending"), row("e", "lost")]
    )  # fmt: skip
    assert (state.completed, state.failed, state.cancelled, state.pending) == (1, 1, 1, 2)
    assert state.states == {"a": "done", "b": "failed", "c": "cancelled", "d": "pending",
                            "e": "lost"}  # fmt: skip


def test_a_done_child_has_its_result_decoded_or_none_and_a_failed_one_its_error() -> None:
    state = state_from_rows(
        [row("a", "done", json.dumps({"n": 2}).encode()), row("b", "done"),
         row("c", "failed", error="boom")]
    )  # fmt: skip
    assert state.results == {"a": {"n": 2}, "b": None}
    assert state.errors == {"c": "boom"}
