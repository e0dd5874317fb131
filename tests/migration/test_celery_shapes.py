"""Celery task shapes of saleor, pretix and paperless-ngx, ported and run through the real
lifecycle on the test database (``run_jobs``: what replaces Celery's eager mode in tests)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_blamequeue import queue

from .shapes import SEEN, ConsumeDocument, ExportOrders, send_webhook


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    for seen in SEEN.values():
        seen.clear()
    yield


def test_a_base_class_on_failure_runs_once_at_the_final_failure_with_the_exception_class(
    run_jobs: Any,
) -> None:
    failing = send_webhook.delay("https://unreachable.example/hook", 7)
    healthy = send_webhook.delay("https://shop.example/hook", 8)
    run_jobs()

    assert SEEN["retry"] == [
        ("migration.send_webhook", 1, "builtins.ConnectionRefusedError"),
        ("migration.send_webhook", 2, "builtins.ConnectionRefusedError"),
    ]
    assert SEEN["failure"] == [
        (
            "migration.send_webhook",
            3,
            "builtins.ConnectionRefusedError",
            ("https://unreachable.example/hook", 7),
        )
    ]
    failed = queue.get_job(failing.job_id)
    assert failed is not None and (failed.state, failed.error_type) == (
        "failed",
        "builtins.ConnectionRefusedError",
    )
    done = queue.get_job(healthy.job_id)
    assert done is not None and (done.state, done.result) == ("done", {"delivered": 8})


def test_a_task_class_with_run_and_its_own_hook_keeps_the_base_class_hooks(
    run_jobs: Any,
) -> None:
    ExportOrders.delay("democon", fmt="xlsx")
    ExportOrders.delay("democon", fmt="pdf")
    run_jobs()

    assert SEEN["success"] == [
        ("migration.ExportOrders", {"event": "democon", "file": "democon-orders.xlsx"})
    ]
    assert SEEN["failure"] == [("migration.ExportOrders", 1, "builtins.ValueError", ("democon",))]


def test_a_chord_with_an_error_callback_lets_every_page_run_then_reports_once(
    run_jobs: Any,
) -> None:
    parent = ConsumeDocument.enqueue({"document": "invoice.pdf", "pages": 4, "unreadable": [1]})
    run_jobs()

    assert sorted(SEEN["pages"]) == [0, 1, 2, 3]  # the siblings of the failed page ran
    assert SEEN["chord"] == [("error", "invoice.pdf", ["page01"])]
    info = queue.get_job(parent.job_id)
    assert info is not None and info.result == {"indexed": False, "failed": ["page01"]}


def test_a_chord_whose_pages_all_succeed_runs_its_body_with_them_in_order(run_jobs: Any) -> None:
    ConsumeDocument.enqueue({"document": "letter.pdf", "pages": 3, "unreadable": []})
    run_jobs()

    assert SEEN["chord"] == [
        ("body", "letter.pdf", "text of page 0 / text of page 1 / text of page 2")
    ]
