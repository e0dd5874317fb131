"""Demo data for the console: jobs in every state, a DLQ, a DAG flow and a 10,000-job fan-out.

Used by ``make screenshots`` and the browser tests. Every state is reached through the
backend's verbs (enqueue, claim, ack), as a worker would.
"""

from __future__ import annotations

from typing import Any

from django_blamequeue import queue
from django_blamequeue.backends import get_backend

from .factories import XSS, make_failed, make_jobs, settle

RENDER = "demo.jobs.render_report"


def dag_flow(backend: str | None = None) -> dict[str, Any]:
    """extract → (clean, enrich) → load → report, plus an audit side branch; mixed states."""
    flow = queue.enqueue_flow(
        "reports",
        [
            {"name": "extract", "job": RENDER, "payload": {"step": "extract"}},
            {
                "name": "clean",
                "job": RENDER,
                "payload": {"step": "clean"},
                "depends_on": ["extract"],
            },
            {
                "name": "enrich",
                "job": RENDER,
                "payload": {"step": "enrich"},
                "depends_on": ["extract"],
                "max_attempts": 1,
            },
            {
                "name": "load",
                "job": RENDER,
                "payload": {"step": "load"},
                "depends_on": ["clean", "enrich"],
            },
            {
                "name": "report",
                "job": RENDER,
                "payload": {"step": "report"},
                "depends_on": ["load"],
            },
            {
                "name": "audit-trail",
                "job": RENDER,
                "payload": {"step": "audit"},
                "depends_on": ["extract"],
            },
        ],
        backend=backend,
    )
    settle("reports", ["done"], backend=backend)  # extract
    settle("reports", ["done", "failed", "inflight"], backend=backend)  # clean, enrich, audit
    return flow


def fan_out_flow(children: int = 10_000, backend: str | None = None) -> dict[str, Any]:
    """split → ``children`` pages → merge; most pages done, some failed, some running."""
    spec: list[dict[str, Any]] = [{"name": "split", "job": RENDER, "payload": {"step": "split"}}]
    spec += [
        {
            "name": f"page-{i:05d}",
            "job": RENDER,
            "payload": {"step": "page", "page": i},
            "depends_on": ["split"],
            "max_attempts": 1,
        }
        for i in range(children)
    ]
    spec.append(
        {
            "name": "merge",
            "job": RENDER,
            "payload": {"step": "merge"},
            "depends_on": [f"page-{i:05d}" for i in range(children)],
        }
    )
    flow = queue.enqueue_flow("pages", spec, backend=backend)
    settle("pages", ["done"], backend=backend)
    done, failed, running = int(children * 0.72), int(children * 0.03), int(children * 0.02)
    b = get_backend(backend)
    for start in range(0, done, 2000):
        settle("pages", ["done"] * min(2000, done - start), backend=backend)
    settle("pages", ["failed"] * failed, backend=backend, error="TimeoutError: page render")
    b.claim(["pages"], running, 300)
    return flow


def build(backend: str | None = None, *, big_flow: int = 10_000) -> dict[str, Any]:
    emails = make_jobs("emails", 240, name="demo.jobs.send_email", classification="transactional")
    settle("emails", ["done"] * 200 + ["inflight"] * 6, backend=backend, result={"sent": True})
    make_failed(
        "emails",
        4,
        backend=backend,
        name="demo.jobs.send_email",
        error="SMTPServerDisconnected: 421 try later",
    )
    make_jobs("emails", 30, name="demo.jobs.send_email", delay=600, classification="newsletter")
    refused = "ConnectionError: webhook https://hooks.example.com/orders refused"
    hooks = make_failed(
        "webhooks", 14, backend=backend, name="demo.jobs.flaky_webhook", error=refused
    )
    hostile = make_jobs(
        "webhooks",
        1,
        payloads=[{"url": "https://hooks.example.com/<x>", "note": XSS, "body": "<b>bold?</b>"}],
    )
    make_jobs("imports", 50, classification="bulk")
    settle("imports", ["done"] * 20, backend=backend)
    dag = dag_flow(backend)
    fan = fan_out_flow(big_flow, backend) if big_flow else None
    return {"emails": emails, "hooks": hooks, "hostile": hostile[0], "dag": dag, "fan": fan}
