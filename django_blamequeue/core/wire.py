"""The stored shape of jobs and reports outside the job table: outbox rows, manifest specs,
Redis outbox entries. One place, so every writer and reader agrees (tests/golden pins it)."""

from __future__ import annotations

import base64
from dataclasses import asdict
from datetime import datetime
from typing import Any

from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import NewJob, Report


def job_to_body(job: NewJob) -> dict[str, Any]:
    body = asdict(job)
    body["payload"] = {
        "content_type": job.payload.content_type,
        "content_encoding": job.payload.content_encoding,
        "body": base64.b64encode(job.payload.body).decode(),
    }
    body["run_at"] = job.run_at.isoformat() if job.run_at else None
    if isinstance(job.expires, datetime):
        body["expires"] = job.expires.isoformat()
    body["depends_on"] = list(job.depends_on)
    return body


def job_from_body(body: dict[str, Any]) -> NewJob:
    data = dict(body)
    p = data.pop("payload")
    data["payload"] = Encoded(p["content_type"], p["content_encoding"], base64.b64decode(p["body"]))
    data["run_at"] = datetime.fromisoformat(data["run_at"]) if data.get("run_at") else None
    data["depends_on"] = tuple(data.get("depends_on") or ())
    if isinstance(data.get("expires"), str):
        data["expires"] = datetime.fromisoformat(data["expires"])
    return NewJob(**data)


def report_to_body(report: Report) -> dict[str, Any]:
    body = asdict(report)
    body["result"] = base64.b64encode(report.result).decode() if report.result is not None else None
    return body


def report_from_body(body: dict[str, Any]) -> Report:
    data = dict(body)
    data["result"] = base64.b64decode(data["result"]) if data.get("result") is not None else None
    return Report(**data)
