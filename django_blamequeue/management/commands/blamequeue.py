"""``manage.py blamequeue``: the operator's command (stats, DLQ, purge, cancel, flows, enqueue)."""

from __future__ import annotations

import json
import sys
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...api import queue
from ...backends import all_backends, get_backend
from ...exceptions import QueueError
from ...records import JobInfo

STATE_MARK = {
    "pending": "·",
    "blocked": "⏸",
    "inflight": "▶",
    "waiting_children": "⋯",
    "done": "✓",
    "failed": "✗",
    "cancelled": "⊘",
}


class Command(BaseCommand):
    help = (
        "Operate queues: stats | dlq list QUEUE | dlq retry ID | dlq retry --all QUEUE | "
        "purge QUEUE | cancel ID | flow show FLOW_ID | enqueue NAME --payload JSON"
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--backend", default=None, help="backend alias")
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("stats", help="counts per queue and state, breaker state per backend")
        dlq = sub.add_parser("dlq", help="the dead-letter queue").add_subparsers(
            dest="dlq_action", required=True
        )
        lst = dlq.add_parser("list")
        lst.add_argument("queue")
        lst.add_argument("--limit", type=int, default=50)
        lst.add_argument("--offset", type=int, default=0)
        retry = dlq.add_parser("retry")
        retry.add_argument("target", help="job id, or the queue with --all")
        retry.add_argument("--all", action="store_true", help="retry every DLQ job of the queue")
        purge = sub.add_parser("purge", help="delete a queue's waiting jobs")
        purge.add_argument("queue")
        purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        cancel = sub.add_parser("cancel")
        cancel.add_argument("job_id")
        flow = sub.add_parser("flow").add_subparsers(dest="flow_action", required=True)
        show = flow.add_parser("show")
        show.add_argument("flow_id")
        enq = sub.add_parser("enqueue", help="enqueue a registered job")
        enq.add_argument("name")
        enq.add_argument("--payload", default="null", help="JSON payload")
        enq.add_argument("--queue", default=None, help="default: the job's queue")
        enq.add_argument("--delay", type=float, default=None)
        enq.add_argument("--priority", type=int, default=0)
        enq.add_argument("--dedupe-key", default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        try:
            getattr(self, f"do_{action}")(options)
        except QueueError as exc:
            raise CommandError(str(exc)) from exc

    def do_stats(self, options: dict[str, Any]) -> None:
        backends = {b["name"]: b for b in queue.list_backends()}
        header = (
            f"{'backend':<12} {'queue':<20} "
            + " ".join(
                f"{s:>9}"
                for s in (
                    "pending",
                    "blocked",
                    "inflight",
                    "waiting",
                    "done",
                    "failed",
                    "cancelled",
                )
            )
            + "  oldest pending"
        )
        self.stdout.write(header)
        # A named backend must exist: a typo must not print an empty table and exit 0.
        chosen = [get_backend(options["backend"])] if options["backend"] else all_backends()
        for b in chosen:
            for st in b.stats():
                c = st.counts
                age = f"{st.oldest_pending_age:.0f} s" if st.oldest_pending_age is not None else "-"
                self.stdout.write(
                    f"{b.alias:<12} {st.queue:<20} "
                    + " ".join(
                        f"{c.get(s, 0):>9,}"
                        for s in (
                            "pending",
                            "blocked",
                            "inflight",
                            "waiting_children",
                            "done",
                            "failed",
                            "cancelled",
                        )
                    )
                    + f"  {age}"
                )
        for name, entry in backends.items():
            self.stdout.write(
                f"backend {name}: {entry['protocol']}, breaker {entry['breaker_state']}"
            )

    def do_dlq(self, options: dict[str, Any]) -> None:
        if options["dlq_action"] == "list":
            jobs = queue.dlq_list(
                options["queue"],
                limit=options["limit"],
                offset=options["offset"],
                backend=options["backend"],
            )
            total = queue.dlq_size(options["queue"], backend=options["backend"])
            self.stdout.write(f"{total} job(s) in the DLQ of {options['queue']!r}")
            for j in jobs:
                self.stdout.write(
                    f"{j.job_id}  {j.name}  attempts {j.attempts}/{j.max_attempts}  "
                    f"{j.reason or ''}  {j.finished_at:%Y-%m-%d %H:%M:%S}  {j.error or ''}"
                    if j.finished_at
                    else f"{j.job_id}  {j.name}  {j.error or ''}"
                )
            return
        if options["all"]:
            n = queue.dlq_retry_all(options["target"], backend=options["backend"])
            self.stdout.write(f"retried {n} job(s) from the DLQ of {options['target']!r}")
            return
        if not queue.dlq_retry(options["target"], backend=options["backend"]):
            raise CommandError(f"job {options['target']} is not in the DLQ")
        self.stdout.write(f"retried {options['target']}")

    def do_purge(self, options: dict[str, Any]) -> None:
        name = options["queue"]
        if not options["yes"] and sys.stdin.isatty():
            answer = input(
                f"Delete every waiting job of {name!r}? Type the queue name to confirm: "
            )
            if answer.strip() != name:
                raise CommandError("not confirmed; nothing deleted")
        n = queue.purge(name, backend=options["backend"])
        self.stdout.write(f"purged {n} waiting job(s) from {name!r}")

    def do_cancel(self, options: dict[str, Any]) -> None:
        job_id = options["job_id"]
        info = queue.get_job(job_id, backend=options["backend"])
        if info is None:
            raise CommandError(f"no job {job_id}")
        if not queue.cancel(job_id, backend=options["backend"]):
            raise CommandError(f"job {job_id} is {info.state}: not cancellable")
        after = queue.get_job(job_id, backend=options["backend"])
        how = "cancelled" if after and after.state == "cancelled" else "cancel requested (running)"
        self.stdout.write(f"{job_id}: {how}")

    def do_flow(self, options: dict[str, Any]) -> None:
        jobs = queue.flow_jobs(options["flow_id"], backend=options["backend"])
        if not jobs:
            raise CommandError(f"no flow {options['flow_id']}")
        for line in render_flow(options["flow_id"], jobs):
            self.stdout.write(line)

    def do_enqueue(self, options: dict[str, Any]) -> None:
        from ... import registry

        definition = registry.get(options["name"])
        if definition is None:
            raise CommandError(f"no job is registered as {options['name']!r}")
        try:
            payload = json.loads(options["payload"], parse_constant=_not_json)
        except (ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, huge ints
            raise CommandError(f"--payload is not JSON: {_short(exc)}") from exc
        job = queue.enqueue(
            options["queue"] or definition.queue,
            payload,
            name=definition.name,
            delay=options["delay"],
            priority=options["priority"],
            dedupe_key=options["dedupe_key"],
            backend=options["backend"] or definition.backend,
        )
        note = " (deduplicated: existing job)" if job.deduplicated else ""
        self.stdout.write(f"enqueued {job.job_id} on {job.queue_name!r}{note}")


def _not_json(constant: str) -> Any:
    """``json.loads`` reads NaN and Infinity; JSON has no such numbers."""
    raise ValueError(f"{constant} is not a JSON number")


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else f"{text[:199]}…"


def render_flow(flow_id: str, jobs: list[JobInfo]) -> list[str]:
    """A flow as text: one line per job in dependency order, with its state and deps."""
    by_id = {j.job_id: j for j in jobs}
    counts: dict[str, int] = {}
    for j in jobs:
        counts[j.state] = counts.get(j.state, 0) + 1
    lines = [
        f"flow {flow_id}: {len(jobs)} job(s) · "
        + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    ]
    depth: dict[str, int] = {}

    def level(job_id: str, seen: frozenset[str] = frozenset()) -> int:
        if job_id in depth:
            return depth[job_id]
        job = by_id[job_id]
        if job.parent_id in by_id and job.parent_id not in seen:  # a child sits under its parent
            depth[job_id] = 1 + level(job.parent_id, seen | {job_id})
            return depth[job_id]
        deps = [d for d in job.depends_on if d in by_id and d not in seen]
        depth[job_id] = 1 + max((level(d, seen | {job_id}) for d in deps), default=-1)
        return depth[job_id]

    def order(j: JobInfo) -> tuple[str, ...]:
        """Parents before their children, children in key order."""
        chain: list[str] = []
        node: JobInfo | None = j
        while node is not None:
            chain.append(f"{level(node.job_id):04d}{node.job_id}")
            node = by_id.get(node.parent_id) if node.parent_id else None
        return tuple(reversed(chain))

    for j in sorted(jobs, key=order):
        deps = ", ".join(_label(by_id[d]) if d in by_id else d for d in j.depends_on)
        indent = "   " * level(j.job_id)
        arrow = f"  ← {deps}" if deps else ""
        mark = STATE_MARK.get(j.state, "?")
        tally = ""
        if j.children:
            tally = "  children: " + ", ".join(f"{n} {s}" for s, n in sorted(j.children.items()))
        lines.append(f"{indent}{mark} {_label(j)} [{j.state}] {j.job_id}{arrow}{tally}")
    return lines


def _label(j: JobInfo) -> str:
    return f"{j.flow_key} ({j.name})" if j.flow_key and j.flow_key != j.name else j.name
