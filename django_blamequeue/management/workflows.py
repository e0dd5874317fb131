"""The durable-workflow sub-commands of ``manage.py blamequeue``: ``workflow show|rerun|cancel|
send-event`` and its short form ``send-event`` (docs/workflows.md). Mixed into the command;
the timeline's text is ``render_timeline``'s, a pure function of what was read."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.core.management.base import CommandError

from django_blamequeue.api import queue
from django_blamequeue.core.records import JobInfo
from django_blamequeue.jobs.workflow_ops import StepView
from django_blamequeue.management.control import _user
from django_blamequeue.management.render import STATE_MARK, when

STEP_MARK = {"done": "✓", "failed": "✗", "waiting": "⋯", "timed_out": "⌛", "raised": "✗"}


def _add_send_event(parser: Any) -> None:
    parser.add_argument("name", help="the event's name, as in ctx.wait_for_event(NAME, ...)")
    parser.add_argument("--key", default="", help="the event's key (default: none)")
    parser.add_argument("--payload", default="null", help="the event's JSON payload")
    parser.add_argument(
        "--keep", type=float, default=None, help="seconds to keep it if nobody waits yet"
    )


def add_arguments(sub: Any) -> None:
    wf = sub.add_parser("workflow", help="a durable workflow: timeline, re-run, cancel, event")
    verbs = wf.add_subparsers(dest="workflow_action", required=True)
    verbs.add_parser("show", help="the workflow's steps, timers and waits").add_argument("job_id")
    rerun = verbs.add_parser(
        "rerun",
        help="run an ended workflow again from step N (a new job; steps before N are kept)",
    )
    rerun.add_argument("job_id")
    rerun.add_argument("--from-step", type=int, required=True, metavar="N", help="1-based")
    verbs.add_parser("cancel", help="cancel the workflow (a waiting one ends now)").add_argument(
        "job_id"
    )
    _add_send_event(verbs.add_parser("send-event", help="deliver an event to what waits for it"))
    _add_send_event(sub.add_parser("send-event", help="deliver an event to a waiting workflow"))


class WorkflowCommands:
    stdout: Any

    def do_workflow(self, options: dict[str, Any]) -> None:
        verb = options["workflow_action"].replace("-", "_")
        getattr(self, f"_workflow_{verb}")(options)

    def do_send_event(self, options: dict[str, Any]) -> None:
        try:
            payload = json.loads(options["payload"])
        except ValueError as exc:
            raise CommandError(f"--payload is not JSON: {exc}") from exc
        event_id = queue.send_event(
            options["name"],
            key=options["key"],
            payload=payload,
            backend=options["backend"],
            keep=options["keep"],
            user=_user(),
        )
        key = f" key {options['key']!r}" if options["key"] else ""
        self.stdout.write(f"sent event {options['name']!r}{key} (id {event_id})")

    def _workflow_send_event(self, options: dict[str, Any]) -> None:
        self.do_send_event(options)

    def _workflow_show(self, options: dict[str, Any]) -> None:
        job_id = options["job_id"]
        info = queue.get_job(job_id, backend=options["backend"])
        if info is None:
            raise CommandError(f"no job {job_id}")
        for line in render_timeline(info, queue.workflow_steps(job_id, backend=info.backend)):
            self.stdout.write(line)

    def _workflow_rerun(self, options: dict[str, Any]) -> None:
        job_id, n = options["job_id"], options["from_step"]
        new = queue.rerun_workflow(job_id, n, backend=options["backend"], user=_user())
        self.stdout.write(
            f"re-running {job_id} from step {n} as {new.job_id} on {new.queue_name!r} "
            f"(show it with: blamequeue workflow show {new.job_id})"
        )

    def _workflow_cancel(self, options: dict[str, Any]) -> None:
        job_id = options["job_id"]
        info = queue.get_job(job_id, backend=options["backend"])
        if info is None:
            raise CommandError(f"no job {job_id}")
        if not queue.cancel(job_id, backend=info.backend):
            raise CommandError(f"workflow {job_id} is {info.state}: not cancellable")
        after = queue.get_job(job_id, backend=info.backend)
        how = "cancelled" if after and after.state == "cancelled" else "cancel requested (running)"
        self.stdout.write(f"{job_id}: {how}")


def render_timeline(info: JobInfo, steps: Sequence[StepView]) -> list[str]:
    """A workflow as lines: the job, then one line per step, timer and wait, in order."""
    mark = STATE_MARK.get(info.state, "?")
    lines = [
        f"workflow {info.job_id}  {info.name}  {mark} {info.state}  "
        f"attempts {info.attempts}/{info.max_attempts}  queue {info.queue}",
    ]
    if not steps:
        lines.append("  no step recorded yet")
    for s in steps:
        lines.append(
            f"  {s.number:>3}. {STEP_MARK.get(s.status, '?')} {s.name}  {s.kind} {s.status}  "
            f"attempt {s.attempt}  {when(s.started_at)} → {when(s.finished_at)}"
        )
        if s.kind == "sleep" and s.wake_at:
            lines.append(f"       due {when(s.wake_at)}")
        if s.kind == "event":
            deadline = f", until {when(s.wake_at)}" if s.wake_at else ""
            lines.append(f"       waits for event {s.event}{deadline}")
        if s.child_id:
            lines.append(f"       child {s.child_id} (backend {s.child_backend})")
        if s.status == "done" and s.kind in ("step", "atomic", "child", "event"):
            lines.append(f"       result {s.result_bytes} B: {s.preview}")
        if s.error:
            lines.append(f"       error: {s.error}")
    if len(steps) > 1:
        lines.append(
            f"  re-run from step N with: blamequeue workflow rerun {info.job_id} --from-step N"
        )
    return lines
