"""The control plane's sub-commands of ``manage.py blamequeue``: pause, resume, limits, workers,
and what ``stats`` adds below its table (paused queues, limits, jobs waiting for a handler,
queues no live worker serves). Mixed into the command; the text is ``render``'s."""

from __future__ import annotations

from argparse import ArgumentParser, ArgumentTypeError
from typing import Any

from django.core.management.base import CommandError

from django_blamequeue.api import queue
from django_blamequeue.backends import all_backends, get_backend
from django_blamequeue.backends.base import Backend
from django_blamequeue.core.validation import parse_key_weight, parse_limit_rate
from django_blamequeue.exceptions import QueueError
from django_blamequeue.management.render import (
    render_controls,
    render_limits,
    render_unserved,
    render_waits,
    render_workers,
)
from django_blamequeue.worker import fleet

NONE = "none"


def _count(text: str) -> int | str:
    if text.lower() == NONE:
        return NONE
    try:
        value = int(text)
    except ValueError:
        raise ArgumentTypeError(f"expected a positive integer or 'none', not {text!r}") from None
    if value < 1:
        raise ArgumentTypeError(f"expected a positive integer or 'none', not {text!r}")
    return value


def _rate(text: str) -> tuple[int, float] | str:
    if text.lower() == NONE:
        return NONE
    try:
        return parse_limit_rate(text)
    except QueueError as exc:
        raise ArgumentTypeError(exc.message) from None


def _weight(text: str) -> tuple[str, int] | str:
    if text.lower() == NONE:
        return NONE
    try:
        return parse_key_weight(text)
    except QueueError as exc:
        raise ArgumentTypeError(exc.message) from None


def add_arguments(sub: Any) -> None:
    pause = sub.add_parser("pause", help="stop every worker claiming from a queue")
    pause.add_argument("queue")
    pause.add_argument("--reason", default="", help="why (shown in stats and the admin)")
    sub.add_parser("resume", help="let workers claim from a paused queue again").add_argument(
        "queue"
    )
    limits: ArgumentParser = sub.add_parser(
        "limits",
        help="show a queue's limits, or change them (across every worker)",
        description="With no option, print the limits in force. Options change only the "
        "limits they name ('none' lifts one); the result is stored as the queue's live "
        "limits, which replace its BLAMEQUEUE['QUEUES'] defaults until --clear.",
    )
    limits.add_argument("queue")
    limits.add_argument("--concurrency", type=_count, metavar="N")
    limits.add_argument("--key-concurrency", type=_count, metavar="N")
    limits.add_argument("--rate-limit", type=_rate, metavar="MAX/SECONDS")
    limits.add_argument("--key-rate-limit", type=_rate, metavar="MAX/SECONDS")
    limits.add_argument(
        "--key-weight",
        type=_weight,
        action="append",
        metavar="PATTERN=WEIGHT",
        help="a weighted share for the concurrency keys matching PATTERN (repeat it; the "
        "ones given replace the stored weights; 'none' removes them)",
    )
    limits.add_argument(
        "--clear", action="store_true", help="drop the live limits (settings defaults apply)"
    )
    sub.add_parser("workers", help="the worker registry: live, stopped and gone workers")


def _user() -> str:
    """Who ran the command, for the audit row."""
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # no user name in the environment
        return "cli"


class ControlCommands:
    stdout: Any

    def backends(self, options: dict[str, Any]) -> list[Backend]:
        """The ``--backend`` given, else every configured backend."""
        alias = options["backend"]
        return [get_backend(alias)] if alias else list(all_backends())

    def do_pause(self, options: dict[str, Any]) -> None:
        name, alias = options["queue"], options["backend"]
        queue.pause(name, backend=alias, reason=options["reason"], user=_user())
        self.stdout.write(
            f"paused {name!r} on backend {get_backend(alias).alias}: no worker claims from it "
            "now; jobs in flight finish (resume with: blamequeue resume " + name + ")"
        )

    def do_resume(self, options: dict[str, Any]) -> None:
        name, alias = options["queue"], options["backend"]
        queue.resume(name, backend=alias, user=_user())
        self.stdout.write(f"resumed {name!r} on backend {get_backend(alias).alias}")

    def do_limits(self, options: dict[str, Any]) -> None:
        name, alias = options["queue"], options["backend"]
        fields = ("concurrency", "key_concurrency", "rate_limit", "key_rate_limit")
        given: dict[str, Any] = {f: options[f] for f in fields if options[f] is not None}
        if options.get("key_weight"):
            pairs = [w for w in options["key_weight"] if w != NONE]
            given["key_weights"] = dict(pairs) if pairs else NONE
        if options["clear"] and given:
            raise CommandError("--clear drops every live limit: give it alone")
        if options["clear"]:
            queue.clear_limits(name, backend=alias, user=_user())
        elif given:
            current = queue.get_limits(name, backend=alias)
            merged: dict[str, Any] = {f: getattr(current, f) for f in fields}
            merged["key_weights"] = dict(current.key_weights) or None
            merged.update({f: None if v == NONE else v for f, v in given.items()})
            queue.set_limits(name, backend=alias, user=_user(), **merged)
        for line in render_limits(queue.control(name, backend=alias)):
            self.stdout.write(line)

    def do_workers(self, options: dict[str, Any]) -> None:
        for b in self.backends(options):
            for line in render_workers(fleet.workers(b), fleet.clock(fleet.database_of(b))):
                self.stdout.write(line)

    def stats_notes(self, options: dict[str, Any], waiting: dict[str, dict[str, int]]) -> None:
        """Below the stats table: paused and limited queues, jobs no live worker can run,
        queues no live worker serves (``waiting``: backend → queue → waiting jobs)."""
        lines = render_controls(queue.controls(backend=options["backend"]))
        for b in self.backends(options):
            try:
                served = fleet.served_queues(b)
                lines += render_waits(b.alias, fleet.unhandled(b))
            except QueueError as exc:
                lines.append(f"backend {b.alias}: registry unreadable ({exc})")
                continue
            unserved = [
                (q, n) for q, n in sorted(waiting.get(b.alias, {}).items()) if n and q not in served
            ]
            lines += render_unserved(b.alias, unserved)
        for line in lines:
            self.stdout.write(line)
