"""Task shapes of real Celery codebases, ported (re-written, not copied) as a team moving
over would write them (docs/migrating.md). Each keeps what it did so the tests can read it."""

from __future__ import annotations

from typing import Any

from django_blamequeue import BaseJob, Child, JobEvent, flow, job

QUEUE = "migration"
#: What the hooks and handlers did, in order; the tests clear it first.
SEEN: dict[str, list[Any]] = {"failure": [], "retry": [], "success": [], "pages": [], "chord": []}


# -- every task of the project on one base class with on_failure (saleor, pretix) ------------
class ReportingJob(BaseJob):
    """The project's base: every final failure is reported once, with its exception class,
    and each retry is counted (Celery: ``class Base(Task): def on_failure(...)``)."""

    def on_retry(self, event: JobEvent) -> None:
        SEEN["retry"].append((event.name, event.attempt, event.error_type))

    def on_failure(self, event: JobEvent) -> None:
        SEEN["failure"].append((event.name, event.attempt, event.error_type, event.args))


@job(queue=QUEUE, name="migration.send_webhook", base=ReportingJob, max_attempts=3)
def send_webhook(target_url: str, delivery_id: int) -> dict[str, Any]:
    """saleor's webhook delivery: a refused connection is retried, then reported."""
    if "unreachable" in target_url:
        raise ConnectionRefusedError(f"{target_url} refused the connection")
    return {"delivered": delivery_id}


@job(queue=QUEUE, name="migration.ExportOrders", max_attempts=1)
class ExportOrders(ReportingJob):
    """pretix's exporters: a task class with ``run`` and its own ``on_success``."""

    def run(self, event_slug: str, fmt: str = "csv") -> dict[str, Any]:
        if fmt not in ("csv", "xlsx"):
            raise ValueError(f"unknown export format {fmt!r}")
        return {"event": event_slug, "file": f"{event_slug}-orders.{fmt}"}

    def on_success(self, event: JobEvent) -> None:
        SEEN["success"].append((event.name, event.result))


# -- a chord with an error callback (paperless-ngx's document consumption) ------------------
@job(queue=QUEUE, name="migration.ocr_page", max_attempts=1)
def ocr_page(payload: dict[str, Any]) -> dict[str, Any]:
    """One page of a document: the chord's header tasks."""
    SEEN["pages"].append(payload["page"])
    if payload["page"] in payload["unreadable"]:
        raise OSError(f"page {payload['page']}: the scan is unreadable")
    return {"text": f"text of page {payload['page']}"}


def document_failed(document: str, errors: dict[str, str]) -> None:
    """The chord's ``link_error``: told once, with every failed page."""
    SEEN["chord"].append(("error", document, sorted(errors)))


@flow(queue=QUEUE, name="migration.ConsumeDocument", on_child_failure="continue")
class ConsumeDocument:
    """``chord(group(ocr_page.s(...) ...), index_document.s()).on_error(document_failed.s())``:
    every page runs even when one fails; then the body or the error callback runs, once."""

    def fan_out(self, payload: dict[str, Any]) -> list[Child]:
        return [
            Child(ocr_page, {"page": i, "unreadable": payload["unreadable"]}, key=f"page{i:02d}")
            for i in range(payload["pages"])
        ]

    def collect(self, payload: dict[str, Any], state: Any) -> dict[str, Any]:
        errors = {key: o.error for key, o in state.outcomes.items() if not o.ok}
        if errors:
            document_failed(payload["document"], errors)
            return {"indexed": False, "failed": sorted(errors)}
        text = " / ".join(o.result["text"] for o in state.outcomes.values())
        SEEN["chord"].append(("body", payload["document"], text))
        return {"indexed": True, "pages": state.completed}
