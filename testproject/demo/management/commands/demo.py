"""``manage.py demo``: a small visible workload, drained by a burst worker, then a summary."""

from __future__ import annotations

import time
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand

from demo import jobs
from django_blamequeue import queue


class Command(BaseCommand):
    help = "Enqueue a demo workload (emails, a failing webhook, a 3-step DAG) and drain it."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--emails", type=int, default=300)

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.monotonic()
        emails = jobs.send_email.enqueue_many(
            [{"to": f"user{i}@example.com"} for i in range(options["emails"])]
        )
        webhook = jobs.flaky_webhook.enqueue({"url": "https://hooks.example.com/orders"})
        flow = queue.enqueue_flow(
            "reports",
            [
                {"name": "extract", "job": jobs.render_report.name, "payload": {"step": "extract"}},
                {
                    "name": "transform",
                    "job": jobs.render_report.name,
                    "payload": {"step": "transform"},
                    "depends_on": ["extract"],
                },
                {
                    "name": "load",
                    "job": jobs.render_report.name,
                    "payload": {"step": "load"},
                    "depends_on": ["transform"],
                },
            ],
        )
        self.stdout.write(
            f"enqueued {len(emails)} emails, 1 webhook that always fails, "
            f"and flow {flow['flow_id']} (extract → transform → load)\n"
        )
        call_command(
            "runworker",
            "emails",
            "reports",
            "--burst",
            "--wait-delayed",  # the webhook's retries, until it is in the DLQ
            "--concurrency",
            "8",
            "--progress-interval",
            "0.5",
            stdout=self.stdout._out,
            stderr=self.stderr._out,
        )

        done = sum(1 for e in emails if (j := queue.get_job(e.job_id)) and j.state == "done")
        self.stdout.write("\nsummary")
        self.stdout.write(f"  emails done        {done}/{len(emails)}")
        for step in flow["jobs"]:
            info = queue.get_job(step["job_id"])
            self.stdout.write(f"  flow {step['name']:<13} {info.state if info else '?'}")
        self.stdout.write(f"  DLQ (emails)       {queue.dlq_size('emails')} job(s)")
        for entry in queue.dlq_list("emails", limit=5):
            self.stdout.write(
                f"    {entry.job_id} {entry.name} after {entry.attempts}/{entry.max_attempts} "
                f"attempts: {entry.error}"
            )
        info = queue.get_job(webhook.job_id)
        self.stdout.write(f"  webhook job        {info.state if info else '?'}")
        self.stdout.write(f"  took {time.monotonic() - started:.1f} s\n")
        self.stdout.write(
            "Open the admin:  .venv/bin/python testproject/manage.py createsuperuser\n"
            "                 .venv/bin/python testproject/manage.py runserver\n"
            "                 → http://127.0.0.1:8000/admin/django_blamequeue/job/\n"
            "Inspect:         .venv/bin/python testproject/manage.py blamequeue stats\n"
            "                 .venv/bin/python testproject/manage.py blamequeue flow show "
            f"{flow['flow_id']}"
        )
