"""``manage.py blamequeue``: the operator's command (stats, jobs, DLQ, purge, cancel, flows,
schedules, enqueue). It reads through ``queue`` and the backends; the text is ``render``'s."""

from __future__ import annotations

import json
import sys
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_blamequeue.api import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.core.records import JobInfo
from django_blamequeue.exceptions import QueueError
from django_blamequeue.jobs import calls, registry
from django_blamequeue.jobs.schedules import call_problem, declared, payload_of
from django_blamequeue.management import control, keys, workflows
from django_blamequeue.management.control import ControlCommands
from django_blamequeue.management.keys import KeyCommands
from django_blamequeue.management.preflight import require_migrated
from django_blamequeue.management.render import (
    ScheduleView,
    render_flow,
    render_job,
    render_schedules,
    render_stats,
)
from django_blamequeue.management.workflows import WorkflowCommands


class Command(ControlCommands, WorkflowCommands, KeyCommands, BaseCommand):
    help = (
        "Operate queues: stats | show ID | dlq list [QUEUE] | dlq retry ID | dlq retry --all "
        "QUEUE | purge QUEUE | cancel ID | flow show FLOW_ID | schedules | "
        "enqueue NAME [--payload JSON | --args JSON --kwargs JSON] | "
        "pause QUEUE [--reason TEXT] | resume QUEUE | "
        "limits QUEUE [--concurrency N] [--key-concurrency N] [--rate-limit MAX/SECONDS] "
        "[--key-rate-limit MAX/SECONDS] [--clear] | workers | workflow show|rerun|cancel ID | "
        "send-event NAME [--key K] [--payload JSON] | rotate-keys [--batch N]"
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--backend", default=None, help="backend alias")
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("stats", help="counts per queue and state (due apart from delayed)")
        show = sub.add_parser("show", help="one job: state, attempts, error, traceback, flow")
        show.add_argument("job_id")
        dlq = sub.add_parser("dlq", help="the dead-letter queue").add_subparsers(
            dest="dlq_action", required=True
        )
        lst = dlq.add_parser("list", help="a queue's DLQ, or every queue's without QUEUE")
        lst.add_argument("queue", nargs="?", default=None)
        lst.add_argument("--limit", type=int, default=50, help="jobs shown per queue")
        lst.add_argument("--offset", type=int, default=0)
        retry = dlq.add_parser("retry")
        retry.add_argument("target", help="job id, or the queue with --all")
        retry.add_argument("--all", action="store_true", help="retry every DLQ job of the queue")
        purge = sub.add_parser("purge", help="delete a queue's waiting jobs")
        purge.add_argument("queue")
        purge.add_argument("--yes", action="store_true", help="confirm without being asked")
        cancel = sub.add_parser("cancel")
        cancel.add_argument("job_id")
        flow = sub.add_parser("flow").add_subparsers(dest="flow_action", required=True)
        flow.add_parser("show").add_argument("flow_id")
        schedules = sub.add_parser("schedules", help="every schedule and its next fire times")
        schedules.add_argument("--count", type=int, default=3, help="fire times per schedule")
        enq = sub.add_parser("enqueue", help="enqueue a registered job")
        enq.add_argument("name")
        enq.add_argument("--payload", default=None, help="the job's JSON payload")
        enq.add_argument(
            "--args",
            dest="call_args",
            default=None,
            help="a call's positional arguments, a JSON list",
        )
        enq.add_argument(
            "--kwargs",
            dest="call_kwargs",
            default=None,
            help="a call's keyword arguments, a JSON dict",
        )
        enq.add_argument("--queue", default=None, help="default: the job's (routed) queue")
        enq.add_argument("--delay", type=float, default=None)
        enq.add_argument(
            "--expires", type=float, default=None, help="seconds: not started by then, cancelled"
        )
        enq.add_argument("--priority", type=int, default=0)
        enq.add_argument("--dedupe-key", default=None)
        control.add_arguments(sub)
        workflows.add_arguments(sub)
        keys.add_arguments(sub)

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"].replace("-", "_")
        try:
            if options.get("backend") is not None:
                get_backend(options["backend"])  # a name that is no backend is said first
        except QueueError as exc:
            raise CommandError(str(exc)) from exc
        require_migrated()
        try:
            getattr(self, f"do_{action}")(options)
        except QueueError as exc:
            raise CommandError(str(exc)) from exc

    def write(self, lines: list[str]) -> None:
        for line in lines:
            self.stdout.write(line)

    def do_stats(self, options: dict[str, Any]) -> None:
        stats = [st for b in self.backends(options) for st in b.stats()]
        self.write(render_stats(stats))
        waiting: dict[str, dict[str, int]] = {}
        for st in stats:
            n = st.counts.get("pending", 0) + st.counts.get("blocked", 0)
            waiting.setdefault(st.backend, {})[st.queue] = n
        self.stats_notes(options, waiting)
        for entry in queue.list_backends():
            if options["backend"] in (None, entry["name"]):
                self.stdout.write(
                    f"backend {entry['name']}: {entry['protocol']}, "
                    f"breaker {entry['breaker_state']}"
                )

    def do_show(self, options: dict[str, Any]) -> None:
        info = queue.get_job(options["job_id"], backend=options["backend"])
        if info is None:
            raise CommandError(f"no job {options['job_id']}")
        self.write(render_job(info))

    def do_dlq(self, options: dict[str, Any]) -> None:
        if options["dlq_action"] == "list":
            self._dlq_list(options)
            return
        if options["all"]:
            n = queue.dlq_retry_all(options["target"], backend=options["backend"])
            self.stdout.write(f"retried {n} job(s) from the DLQ of {options['target']!r}")
            return
        if not queue.dlq_retry(options["target"], backend=options["backend"]):
            raise CommandError(f"job {options['target']} is not in the DLQ")
        self.stdout.write(f"retried {options['target']}")

    def _dlq_list(self, options: dict[str, Any]) -> None:
        if options["queue"] is not None:
            self._dlq_of(options["queue"], options["backend"], options)
            return
        found = False
        backends = self.backends(options)
        for b in backends:
            for st in b.stats():
                if st.counts.get("failed", 0):
                    found = True
                    self._dlq_of(st.queue, b.alias, options, named=len(backends) > 1)
        if not found:
            self.stdout.write("every DLQ is empty")

    def _dlq_of(
        self, name: str, alias: str | None, options: dict[str, Any], *, named: bool = False
    ) -> None:
        jobs = queue.dlq_list(name, limit=options["limit"], offset=options["offset"], backend=alias)
        total = queue.dlq_size(name, backend=alias)
        where = f" (backend {alias})" if named else ""
        self.stdout.write(f"{total} job(s) in the DLQ of {name!r}{where}")
        for j in jobs:
            self.stdout.write(_dlq_line(j))

    def do_purge(self, options: dict[str, Any]) -> None:
        name = options["queue"]
        bound = None
        if not options["yes"]:
            bound = get_backend(options["backend"]).now()  # a job enqueued while asked is kept
            if not sys.stdin.isatty():
                raise CommandError(
                    f"purge deletes every waiting job of {name!r}: stdin is not a terminal, so "
                    "nobody can confirm; pass --yes to purge. Nothing deleted."
                )
            answer = input(
                f"Delete every waiting job of {name!r}? Type the queue name to confirm: "
            )
            if answer.strip() != name:
                raise CommandError("not confirmed; nothing deleted")
        n = queue.purge(name, backend=options["backend"], created_before=bound)
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
        self.write(render_flow(options["flow_id"], jobs))

    def do_schedules(self, options: dict[str, Any]) -> None:
        if options["count"] < 1:
            raise CommandError(f"--count must be at least 1, not {options['count']}")
        self.write(render_schedules(_schedules(options["count"])))

    def do_enqueue(self, options: dict[str, Any]) -> None:

        definition = registry.get(options["name"])
        if definition is None:
            raise CommandError(f"no job is registered as {options['name']!r}")
        payload = _payload(options, definition)
        job = queue.enqueue(
            options["queue"] or definition.queue,
            payload,
            name=definition.name,
            delay=options["delay"],
            expires=options["expires"],
            priority=options["priority"],
            dedupe_key=options["dedupe_key"],
            backend=options["backend"] or definition.backend,
        )
        note = " (deduplicated: existing job)" if job.deduplicated else ""
        self.stdout.write(f"enqueued {job.job_id} on {job.queue_name!r}{note}")


def _dlq_line(j: JobInfo) -> str:
    if not j.finished_at:
        return f"{j.job_id}  {j.name}  {j.error or ''}"
    return (
        f"{j.job_id}  {j.name}  attempts {j.attempts}/{j.max_attempts}  {j.reason or ''}  "
        f"{j.finished_at:%Y-%m-%d %H:%M:%S}  {j.error or ''}"
    )


def _schedules(count: int) -> list[ScheduleView]:
    """``SCHEDULES`` (as the sweeper will mirror them) and the admin's rows, by name."""
    from django_blamequeue.conf import get_settings
    from django_blamequeue.core import schedules
    from django_blamequeue.jobs import registry
    from django_blamequeue.models import Schedule

    rows = {s.name: s for s in Schedule.objects.all()}
    now = get_backend(None).now()  # the scheduler's clock
    entries: dict[str, dict[str, Any]] = {
        name: {**entry, "source": "code", "payload": payload_of(entry)}
        for name, entry in declared()[1].items()
    }
    entries |= {
        name: {**entry, "source": "settings", "payload": payload_of(entry)}
        for name, entry in get_settings().schedules.items()
    }
    for name, row in rows.items():
        if name not in entries and row.source == "admin":  # removed ones go next pass
            entries[name] = {
                "job": row.job,
                "queue": row.queue,
                "cron": row.cron,
                "interval": row.interval,
                "timezone": row.timezone,
                "enabled": row.enabled,
                "source": row.source,
                "payload": row.payload,
                "overlap": row.overlap,
                "expires": row.expires,
            }
    views = []
    for name, e in sorted(entries.items()):
        definition = registry.get(e["job"])
        found = rows.get(name)
        last = found.last_fired_at if found is not None else None
        tz = e.get("timezone") or "UTC"
        rule = f"{e['cron']} ({tz})" if e.get("cron") else f"every {e['interval']:g} s"
        problem, fires = None, []
        try:
            fires = schedules.upcoming(
                cron=e.get("cron") or "",
                interval=e.get("interval"),
                tz=tz,
                last_fired=last,
                now=now,
                count=count,
            )
        except Exception as exc:  # an admin row with a bad rule: say so, show the others
            problem = f"{type(exc).__name__}: {exc}"
        views.append(
            ScheduleView(
                name=name,
                source=e["source"],
                job=e["job"],
                queue=e.get("queue") or (definition.queue if definition else None),
                rule=rule,
                tz=tz,
                enabled=e.get("enabled", True) is not False,
                last_fired=last,
                next_fires=fires,
                problem=problem,
                payload=e.get("payload"),
                overlap=e.get("overlap") or "skip",
                skipped=found.skipped if found is not None else 0,
                last_skipped=found.last_skipped_at if found is not None else None,
                expires=e.get("expires"),
            )
        )
    return views


def _payload(options: dict[str, Any], definition: Any) -> Any:
    """What ``enqueue`` stores: ``--payload``, or a call of ``--args`` / ``--kwargs``; none
    of them only for a handler that needs no argument."""
    call = options["call_args"] is not None or options["call_kwargs"] is not None
    if call and options["payload"] is not None:
        raise CommandError("give --payload (one argument) or --args/--kwargs (a call), not both")
    if call:
        args = _json(options["call_args"], "--args", [])
        kwargs = _json(options["call_kwargs"], "--kwargs", {})
        if not isinstance(args, list):
            raise CommandError(f"--args must be a JSON list, not {options['call_args']}")
        if not isinstance(kwargs, dict):
            raise CommandError(f"--kwargs must be a JSON object, not {options['call_kwargs']}")
        payload = calls.envelope(args, kwargs)
    elif options["payload"] is not None:
        payload = _json(options["payload"], "--payload", None)
    elif definition.flow is not None or calls.needs_argument(definition.func):
        raise CommandError(
            f"{definition.name} takes a payload: give --payload JSON (e.g. --payload '{{}}', "
            "or --payload null for none), or --args/--kwargs for a call"
        )
    else:
        payload = None  # a handler that needs no argument is called with none
    if (why := call_problem({"payload": payload}, definition)) is not None:
        raise CommandError(f"{definition.name} {why}")
    return payload


def _json(text: str | None, flag: str, default: Any) -> Any:
    if text is None:
        return default
    try:
        return json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, huge ints
        raise CommandError(f"{flag} is not JSON: {_short(exc)}") from exc


def _not_json(constant: str) -> Any:
    """``json.loads`` reads NaN and Infinity; JSON has no such numbers."""
    raise ValueError(f"{constant} is not a JSON number")


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else f"{text[:199]}…"
