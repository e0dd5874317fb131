"""``manage.py runworker``: run consumers (and, unless ``--no-sweep``, the sweepers)."""

from __future__ import annotations

import gc
import signal
import sys
import threading
from argparse import ArgumentParser, ArgumentTypeError
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from django.core.checks import CheckMessage
from django.core.management.base import BaseCommand, CommandError

from django_blamequeue.api import queue
from django_blamequeue.backends import get_backend
from django_blamequeue.checks import check_queues_known
from django_blamequeue.conf import get_settings
from django_blamequeue.core.records import Backlog
from django_blamequeue.core.validation import MAX_SECONDS, parse_rate_limit
from django_blamequeue.exceptions import QueueError
from django_blamequeue.jobs import registry
from django_blamequeue.management import supervisor
from django_blamequeue.management.preflight import require_migrated
from django_blamequeue.management.render import span
from django_blamequeue.management.sizing import (
    DEFAULT_CONCURRENCY,
    Concurrency,
    connection_bound,
    default_concurrency,
)
from django_blamequeue.observability import metrics
from django_blamequeue.sweeper import Sweeper, services_for
from django_blamequeue.worker import atomic_turns, fleet
from django_blamequeue.worker.progress import ProgressLine, banner, worker_identity


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ArgumentTypeError(f"expected a positive integer, not {text!r}") from None
    if value < 1:
        raise ArgumentTypeError(f"expected a positive integer, not {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ArgumentTypeError(f"expected a positive number, not {text!r}") from None
    if not 0 < value <= MAX_SECONDS:  # also NaN and inf
        raise ArgumentTypeError(f"expected seconds > 0 and ≤ {MAX_SECONDS:,}, not {text!r}")
    return value


def non_negative_float(text: str) -> float:
    if text in ("0", "0.0"):
        return 0.0
    return positive_float(text)


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ArgumentTypeError(f"expected a TCP port, not {text!r}") from None
    if not 0 < value < 65536:
        raise ArgumentTypeError(f"expected a TCP port (1-65535), not {text!r}")
    return value


def rate_limit(text: str) -> tuple[int, float]:
    try:
        return parse_rate_limit(text)
    except QueueError as exc:
        raise ArgumentTypeError(exc.message) from None


#: The exit status of a worker whose main loop died (EX_SOFTWARE): restart it.
EXIT_DIED = 70


def _mode(options: Any) -> str:
    if not options.burst:
        return "run until signalled"
    if options.wait_delayed:
        return "burst (exit when empty, delayed jobs included)"
    return "burst (exit when nothing is due)"


def _delayed_left(left: Backlog) -> str:
    """What a burst leaves behind: the delayed jobs, and when the next one is due."""
    when = ""
    if left.next_due_at is not None:
        seconds = max(0.0, (left.next_due_at - datetime.now(UTC)).total_seconds())
        soon = f"{seconds:.1f} s" if seconds < 10 else span(seconds)
        when = f"; the next is due in {soon} ({left.next_due_at:%Y-%m-%d %H:%M:%S} UTC)"
    return f"{left.delayed:,} delayed job(s) left{when}; --wait-delayed waits for them"


class Command(BaseCommand):
    help = (
        "Run a worker for QUEUE ... (default: every queue with a registered job). Run one per "
        "core on each host; SIGTERM/SIGINT stops leasing and lets handlers finish within the "
        "grace period, a second signal stops at once."
    )

    _sizing: Concurrency | None = None

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("queues", nargs="*", metavar="QUEUE")
        parser.add_argument(
            "--backend", default=None, help="backend alias (default: DEFAULT_BACKEND)"
        )
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            default=None,
            help=f"handler slots (default {DEFAULT_CONCURRENCY})",
        )
        parser.add_argument("--lease", type=positive_float, default=None, help="lease seconds")
        parser.add_argument("--poll", type=positive_float, default=1.0, help="idle poll seconds")
        parser.add_argument("--fast-poll", type=positive_float, default=0.05)
        parser.add_argument("--rate-limit", type=rate_limit, default=None, metavar="MAX/SECONDS")
        parser.add_argument(
            "--burst", action="store_true", help="exit when nothing is due (delayed jobs stay)"
        )
        parser.add_argument(
            "--wait-delayed",
            action="store_true",
            help="with --burst: also wait for delayed and retrying jobs to come due and run",
        )
        parser.add_argument("--no-sweep", action="store_true", help="do not run the sweepers")
        parser.add_argument(
            "--grace",
            type=non_negative_float,
            default=None,
            help="seconds in-flight handlers get at shutdown (SHUTDOWN_GRACE)",
        )
        parser.add_argument(
            "--metrics-port",
            type=port,
            default=None,
            help="serve Prometheus /metrics on this port (prometheus extra)",
        )
        parser.add_argument(
            "--metrics-address",
            default="127.0.0.1",
            help="address --metrics-port binds (default 127.0.0.1: this host only; 0.0.0.0 "
            "opens it on every interface)",
        )
        parser.add_argument(
            "--progress-interval",
            type=positive_float,
            default=None,
            help="seconds between progress lines when not on a terminal",
        )
        parser.add_argument(
            "--processes",
            type=positive_int,
            default=None,
            help="run N worker processes under a supervisor that replaces one that exits",
        )
        parser.add_argument(
            "--max-jobs-per-process",
            type=positive_int,
            default=None,
            metavar="N",
            help="recycle a worker process after N jobs (it finishes them first)",
        )
        parser.add_argument(
            "--max-memory-per-process",
            type=positive_int,
            default=None,
            metavar="MB",
            help="recycle a worker process whose resident memory passes MB (jobs finish first)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        queues = options["queues"] or registry.queues()
        if not queues:
            raise CommandError("no queues given and no @job registered: name the queues to consume")
        settings = get_settings()
        require_migrated()
        if options["processes"] is not None:
            self._supervise(queues, options)
            return
        bounds = supervisor.RecycleBounds(
            options["max_jobs_per_process"], options["max_memory_per_process"]
        )
        metrics_server = self._serve_metrics(options["metrics_port"], options["metrics_address"])
        # Everything loaded so far (Django, the apps, the job modules) lives as long as the
        # process: keep it out of the cyclic collector's full passes, which otherwise walk it
        # again and again while jobs allocate.
        gc.freeze()
        try:
            concurrency = options["concurrency"]
            # Read before the worker starts: a job it finished would no longer count as use.
            unused = check_queues_known(get_backend(options["backend"]), options["queues"])
            self._sizing = None
            if concurrency is None:
                self._sizing = default_concurrency(get_backend(options["backend"]), queues)
                concurrency = self._sizing.slots
            consumer = queue.consume(
                queues,
                None,
                concurrency=concurrency,
                lease=options["lease"],
                poll_interval=options["poll"],
                fast_poll=options["fast_poll"],
                rate_limit=options["rate_limit"],
                backend=options["backend"],
                burst=options["burst"],
                wait_delayed=options["wait_delayed"],
                max_jobs=options["max_jobs_per_process"],
            )
        except QueueError as exc:
            if metrics_server is not None:
                metrics_server.shutdown()
            raise CommandError(str(exc)) from exc
        grace = settings.shutdown_grace if options["grace"] is None else options["grace"]
        sweeper = None if options["no_sweep"] else Sweeper(services_for([consumer.backend]))
        self._print_banner(consumer, queues, grace, sweeper is not None, unused)
        if metrics_server is not None:
            host, bound = metrics_server.server_address[:2]
            self.stdout.write(f"  metrics  http://{host}:{bound}/metrics")
        if sweeper is not None:
            sweeper.start()
        signals = {"count": 0}
        stopped = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            signals["count"] += 1
            if signals["count"] == 1:
                self.stderr.write(
                    f"\n{signal.Signals(signum).name}: stopping (grace {grace:g} s); "
                    "signal again to stop now"
                )
                consumer.cancel(grace=grace)
            else:
                self.stderr.write("stopping now: releasing in-flight jobs")
                consumer.abort()
            stopped.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        interval = options["progress_interval"]
        line = ProgressLine(
            self.stdout._out,  # type: ignore[arg-type]  # the real stream, so a TTY is detected
            lambda: consumer.counters,
            lambda: f"{consumer.in_flight}/{concurrency}",
            notes=lambda: _notes(consumer),
            **({"log_interval": interval} if interval else {}),
        )
        recycling: str | None = None
        try:
            ticks = 0
            while not consumer.join(timeout=0.2):
                line.tick()
                ticks += 1
                if stopped.is_set() or recycling or ticks % 5:
                    continue  # bounds and the parent: checked once a second
                if supervisor.parent_gone():
                    self.stderr.write(f"the supervisor is gone: stopping (grace {grace:g} s)")
                    consumer.cancel(grace=grace)
                    stopped.set()
                elif bounds and (recycling := bounds.crossed(consumer.counters.claimed)):
                    self.stderr.write(f"recycling: {recycling}; letting its jobs finish")
                    consumer.cancel(grace=MAX_SECONDS)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if sweeper is not None:
                sweeper.stop()
            if metrics_server is not None:
                metrics_server.shutdown()
        summary = line.close()
        if consumer.failure is not None:  # the main loop died: a supervisor must restart us
            self.stdout.write(f"died: {summary}")
            raise CommandError(
                f"the worker's main loop died: {consumer.failure!r} (traceback above)",
                returncode=EXIT_DIED,
            )
        if recycling and not stopped.is_set():
            self.stdout.write(f"recycled: {summary}")
            sys.stdout.flush()
            raise SystemExit(supervisor.EXIT_RECYCLE)
        how = "burst finished" if options["burst"] and not stopped.is_set() else "stopped"
        self.stdout.write(f"{how}: {summary}")
        if how == "burst finished" and consumer.left is not None and consumer.left.delayed:
            self.stdout.write(_delayed_left(consumer.left))
        sys.stdout.flush()

    def _supervise(self, queues: list[str], options: dict[str, Any]) -> None:
        """``--processes N``: run the workers under a supervisor (``management/supervisor``)."""
        if options["metrics_port"] is not None:
            raise CommandError(
                "--metrics-port serves one process: run the workers without --processes, "
                "each with its own port, to scrape them"
            )
        n = options["processes"]
        try:
            b = get_backend(options["backend"])
            slots = options["concurrency"] or default_concurrency(b, queues).slots
            bound = connection_bound(b, queues, slots, sweeping=not options["no_sweep"])
        except QueueError as exc:
            raise CommandError(str(exc)) from exc
        recycle = [
            f"after {options['max_jobs_per_process']:,} jobs"
            if options["max_jobs_per_process"]
            else "",
            f"past {options['max_memory_per_process']:,} MB resident"
            if options["max_memory_per_process"]
            else "",
        ]
        rows = [
            ("processes", f"{n} worker processes, each replaced when it exits"),
            ("queues", ", ".join(queues)),
            ("concurrency", f"{slots} slots per process, {n * slots} in all"),
            (
                "db connections",
                f"≤ {n * bound.total} per database in all ({n} × {bound.total}: "
                f"{bound.slots} slots + {', '.join(bound.threads)})",
            ),
            (
                "recycle",
                " or ".join(r for r in recycle if r)
                or "never (--max-jobs-per-process, --max-memory-per-process)",
            ),
        ]
        self.stdout.write(banner("django-blamequeue · runworker supervisor", rows))
        sys.stdout.flush()
        boss = supervisor.Supervisor(
            _worker_command(options), n, out=sys.stdout, burst=options["burst"]
        )
        boss.run()

    def _concurrency_row(self, slots: int) -> str:
        if self._sizing is None:
            return f"{slots} (--concurrency)"
        return f"{slots} ({self._sizing.why})"

    def _serve_metrics(self, port: int | None, address: str) -> Any:
        if port is None:
            return None
        from django.core.exceptions import ImproperlyConfigured

        try:
            return metrics.serve(port, address)
        except (ImproperlyConfigured, OSError) as exc:
            raise CommandError(f"--metrics-port {port}: {exc}") from exc

    def _print_banner(
        self,
        consumer: Any,
        queues: list[str],
        grace: float,
        sweeping: bool,
        unused: list[CheckMessage],
    ) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            ver = version("django-blamequeue")
        except PackageNotFoundError:  # running from a source tree
            ver = "dev"
        b = consumer.backend
        table = getattr(b, "jobtable", None)  # the local backend's jobs, the SQS ledger
        vendor = (
            table.connection.vendor
            if table is not None
            else str(getattr(b, "engine_label", b.protocol))
        )
        opts = consumer.options
        poll = opts.fast_poll if b.cheap_polling else opts.poll_interval
        wake = b.wake_up if b.supports_listen else f"polling every {poll:g} s"
        rows = [
            ("worker", worker_identity()),
            ("backend", f"{b.alias} ({b.protocol}, {vendor})"),
            ("queues", ", ".join(queues)),
            ("concurrency", self._concurrency_row(opts.concurrency)),
            (
                "db connections",
                connection_bound(b, queues, opts.concurrency, sweeping=sweeping).describe(),
            ),
            (
                "lease",
                f"{consumer.options.lease:g} s (renewed every {consumer.options.lease / 2:g} s)",
            ),
            ("wake-up", wake),
            (
                "rate limit",
                "{} per {:g} s".format(*consumer.options.rate_limit)
                if consumer.options.rate_limit
                else "none",
            ),
            ("async jobs", _async_row(queues, consumer.options.concurrency)),
            *[("atomic jobs", t) for t in [atomic_turns.describe(b, queues)] if t],
            ("shutdown grace", f"{grace:g} s"),
            ("sweeper", "on" if sweeping else "off (--no-sweep)"),
            ("mode", _mode(consumer.options)),
        ]
        rows += _control_rows(consumer)
        rows += [("warning", text) for text in b.deployment_warnings()]
        for warning in unused:
            rows.append(("warning", f"{warning.msg}. {warning.hint} ({warning.id})"))
        self.stdout.write(banner(f"django-blamequeue {ver} · runworker", rows))


def _worker_command(options: dict[str, Any]) -> list[str]:
    """The ``runworker`` arguments of each process a supervisor starts: the same as its own
    without ``--processes``."""
    args = ["runworker", *options["queues"]]
    valued = {
        "--backend": options["backend"],
        "--concurrency": options["concurrency"],
        "--lease": options["lease"],
        "--poll": options["poll"],
        "--fast-poll": options["fast_poll"],
        "--grace": options["grace"],
        "--progress-interval": options["progress_interval"],
        "--max-jobs-per-process": options["max_jobs_per_process"],
        "--max-memory-per-process": options["max_memory_per_process"],
    }
    if options["rate_limit"] is not None:
        valued["--rate-limit"] = "{}/{}".format(*options["rate_limit"])
    for flag, value in valued.items():
        if value is not None:
            args += [flag, str(value)]
    flags = {"--burst": "burst", "--wait-delayed": "wait_delayed", "--no-sweep": "no_sweep"}
    args += [flag for flag, key in flags.items() if options[key]]
    return args


def _notes(consumer: Any) -> list[str]:
    """The progress line's words about the control plane: paused queues, jobs this worker
    has no handler for (by name)."""
    notes = []
    paused = consumer.control.paused()
    if paused:
        notes.append("paused " + ", ".join(paused))
    if consumer.no_handler:
        names = sorted(consumer.no_handler, key=lambda n: -consumer.no_handler[n])
        shown = ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "")
        notes.append(f"waiting for a handler: {shown}")
    return notes


def _control_rows(consumer: Any) -> list[tuple[str, str]]:
    """Banner rows: paused and limited queues, jobs no running worker has a handler for."""
    try:
        consumer.control.refresh(force=True)
        rows: list[tuple[str, str]] = consumer.control.describe()
        queues = set(consumer.options.queues)
        waits = [w for w in fleet.unhandled(consumer.backend) if w.queue in queues]
    except QueueError as exc:
        return [("control", f"could not be read ({exc})")]
    rows.append(("handlers", f"{len(registry.registered())} job names registered"))
    total = sum(w.count for w in waits)
    if total:
        names = ", ".join(f"{w.name} ({w.count:,})" for w in waits[:3])
        rows.append(
            ("waiting", f"{total:,} job(s) wait for a handler no running worker has: {names}")
        )
    return rows


def _async_row(queues: list[str], concurrency: int) -> str:
    """What the banner says of ``async def`` handlers: they run on an event loop thread,
    inside the same ``--concurrency`` slots as threaded ones."""
    names = sorted(
        d.name for d in registry.registered().values() if d.queue in queues and d.is_async
    )
    if not names:
        return "none registered here (an event loop starts with the first one)"
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (
        f"{len(names)} async def job{'s' if len(names) != 1 else ''} ({shown}) run on one "
        f"event loop, sharing the {concurrency} slots"
    )
