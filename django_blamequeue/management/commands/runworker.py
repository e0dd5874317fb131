"""``manage.py runworker``: run consumers (and, unless ``--no-sweep``, the sweepers)."""

from __future__ import annotations

import gc
import signal
import sys
import threading
from argparse import ArgumentParser, ArgumentTypeError
from types import FrameType
from typing import Any

from django.core.checks import CheckMessage
from django.core.management.base import BaseCommand, CommandError

from django_blamequeue.api import queue
from django_blamequeue.backends import Backend, get_backend
from django_blamequeue.checks import check_queues_known
from django_blamequeue.conf import get_settings
from django_blamequeue.core.validation import MAX_SECONDS, parse_rate_limit
from django_blamequeue.exceptions import QueueError
from django_blamequeue.jobs import registry
from django_blamequeue.management import banner, supervisor
from django_blamequeue.management.preflight import require_migrated
from django_blamequeue.management.sizing import (
    DEFAULT_CONCURRENCY,
    Concurrency,
    ConnectionBound,
    connection_bound,
    default_concurrency,
)
from django_blamequeue.observability import metrics
from django_blamequeue.sweeper import Sweeper, services_for
from django_blamequeue.worker import progress
from django_blamequeue.worker.consumer import Consumer
from django_blamequeue.worker.counters import Counters
from django_blamequeue.worker.progress import ProgressLine


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
            "--backend",
            action="append",
            default=None,
            metavar="NAME",
            help="backend alias (default: DEFAULT_BACKEND); repeat it to serve several "
            "backends from one process, each with its own loop and slots",
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
        aliases = _aliases(options["backend"])
        bounds = supervisor.RecycleBounds(
            options["max_jobs_per_process"], options["max_memory_per_process"]
        )
        metrics_server = self._serve_metrics(options["metrics_port"], options["metrics_address"])
        # Everything loaded so far (Django, the apps, the job modules) lives as long as the
        # process: keep it out of the cyclic collector's full passes, which otherwise walk it
        # again and again while jobs allocate.
        gc.freeze()
        consumers: list[Consumer] = []
        try:
            # Read before the worker starts: a job it finished would no longer count as use.
            unused = _unused_queues(aliases, options["queues"])
            self._sizing = None
            for alias in aliases:
                concurrency = options["concurrency"]
                if concurrency is None:
                    self._sizing = default_concurrency(get_backend(alias), queues)
                    concurrency = self._sizing.slots
                consumers.append(
                    queue.consume(
                        queues,
                        None,
                        concurrency=concurrency,
                        lease=options["lease"],
                        poll_interval=options["poll"],
                        fast_poll=options["fast_poll"],
                        rate_limit=options["rate_limit"],
                        backend=alias,
                        burst=options["burst"],
                        wait_delayed=options["wait_delayed"],
                        max_jobs=options["max_jobs_per_process"],
                    )
                )
        except QueueError as exc:
            for started in consumers:
                started.abort()
            if metrics_server is not None:
                metrics_server.shutdown()
            raise CommandError(str(exc)) from exc
        grace = settings.shutdown_grace if options["grace"] is None else options["grace"]
        sweeper = (
            None if options["no_sweep"] else Sweeper(services_for([c.backend for c in consumers]))
        )
        rows = banner.worker_rows(
            consumers,
            queues,
            concurrency=self._concurrency_row(consumers[0].options.concurrency),
            grace=grace,
            sweeping=sweeper is not None,
            unused=unused,
        )
        self.stdout.write(progress.banner(f"django-blamequeue {_version()} · runworker", rows))
        if metrics_server is not None:
            host, bound = metrics_server.server_address[:2]
            self.stdout.write(f"  metrics  http://{host}:{bound}/metrics")
        if sweeper is not None:
            sweeper.start()
        signals = {"count": 0}
        stopped = threading.Event()

        def cancel_all(seconds: float) -> None:
            for c in consumers:
                c.cancel(grace=seconds)

        def on_signal(signum: int, frame: FrameType | None) -> None:
            signals["count"] += 1
            if signals["count"] == 1:
                self.stderr.write(
                    f"\n{signal.Signals(signum).name}: stopping (grace {grace:g} s); "
                    "signal again to stop now"
                )
                cancel_all(grace)
            else:
                self.stderr.write("stopping now: releasing in-flight jobs")
                for c in consumers:
                    c.abort()
            stopped.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        interval = options["progress_interval"]
        slots = sum(c.options.concurrency for c in consumers)
        line = ProgressLine(
            self.stdout._out,  # type: ignore[arg-type]  # the real stream, so a TTY is detected
            lambda: Counters.total([c.counters for c in consumers]),
            lambda: f"{sum(c.in_flight for c in consumers)}/{slots}",
            notes=lambda: [n for c in consumers for n in banner.notes(c, len(consumers) > 1)],
            **({"log_interval": interval} if interval else {}),
        )
        recycling: str | None = None
        failed: Consumer | None = None
        try:
            ticks = 0
            while not _joined(consumers, timeout=0.2):
                line.tick()
                ticks += 1
                if failed is None and (failed := _first_failed(consumers)) is not None:
                    # one backend's loop died: stop the others, so that the process exits
                    # and its supervisor starts a whole one again
                    cancel_all(grace)
                if stopped.is_set() or recycling or ticks % 5:
                    continue  # bounds and the parent: checked once a second
                claimed = sum(c.counters.claimed for c in consumers)
                if supervisor.parent_gone():
                    self.stderr.write(f"the supervisor is gone: stopping (grace {grace:g} s)")
                    cancel_all(grace)
                    stopped.set()
                elif bounds and (recycling := bounds.crossed(claimed)):
                    self.stderr.write(f"recycling: {recycling}; letting its jobs finish")
                    cancel_all(MAX_SECONDS)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if sweeper is not None:
                sweeper.stop()
            if metrics_server is not None:
                metrics_server.shutdown()
        summary = line.close()
        failed = _first_failed(consumers)
        if failed is not None:  # the main loop died: a supervisor must restart us
            self.stdout.write(f"died: {summary}")
            raise CommandError(
                f"the worker's main loop died: {failed.failure!r} (traceback above)",
                returncode=EXIT_DIED,
            )
        if recycling and not stopped.is_set():
            self.stdout.write(f"recycled: {summary}")
            sys.stdout.flush()
            raise SystemExit(supervisor.EXIT_RECYCLE)
        how = "burst finished" if options["burst"] and not stopped.is_set() else "stopped"
        self.stdout.write(f"{how}: {summary}")
        if how == "burst finished":
            for c in consumers:
                if c.left is not None and c.left.delayed:
                    prefix = f"{c.backend.alias}: " if len(consumers) > 1 else ""
                    self.stdout.write(prefix + banner.delayed_left(c.left))
        sys.stdout.flush()

    def _supervise(self, queues: list[str], options: dict[str, Any]) -> None:
        """``--processes N``: run the workers under a supervisor (``management/supervisor``)."""
        if options["metrics_port"] is not None:
            raise CommandError(
                "--metrics-port serves one process: run the workers without --processes, "
                "each with its own port, to scrape them"
            )
        n = options["processes"]
        bounds: list[tuple[Backend, int, ConnectionBound]] = []
        try:
            for alias in _aliases(options["backend"]):
                b = get_backend(alias)
                slots = options["concurrency"] or default_concurrency(b, queues).slots
                sweeping = not options["no_sweep"]
                bounds.append((b, slots, connection_bound(b, queues, slots, sweeping=sweeping)))
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
        ]
        for b, slots, bound in bounds:
            if len(bounds) > 1:
                rows.append(("backend", f"{b.alias} ({b.protocol}{banner.database_of(b)})"))
            rows += [
                ("concurrency", f"{slots} slots per process, {n * slots} in all"),
                (
                    "db connections",
                    f"≤ {n * bound.total} per database in all ({n} × {bound.total}: "
                    f"{bound.slots} slots + {', '.join(bound.threads)})",
                ),
            ]
        rows += [
            (
                "recycle",
                " or ".join(r for r in recycle if r)
                or "never (--max-jobs-per-process, --max-memory-per-process)",
            ),
        ]
        self.stdout.write(progress.banner("django-blamequeue · runworker supervisor", rows))
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


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("django-blamequeue")
    except PackageNotFoundError:  # running from a source tree
        return "dev"


def _aliases(given: list[str] | None) -> list[str]:
    """The backends to serve, each once, in the order ``--backend`` named them."""
    default = get_settings().default_backend
    return list(dict.fromkeys(given or [default]))


def _unused_queues(aliases: list[str], queues: list[str]) -> list[CheckMessage]:
    """W041 for the queues no backend served here knows (a queue holding jobs on any one of
    them is in use)."""
    found = [check_queues_known(get_backend(alias), queues) for alias in aliases]
    everywhere = set.intersection(*({m.msg for m in f} for f in found))
    return [m for m in found[0] if m.msg in everywhere]


def _joined(consumers: list[Consumer], timeout: float) -> bool:
    """Whether every consumer's loop has ended, waiting up to ``timeout`` in all."""
    share = timeout / len(consumers)
    return all([c.join(timeout=share) for c in consumers])


def _first_failed(consumers: list[Consumer]) -> Consumer | None:
    return next((c for c in consumers if c.failure is not None), None)


def _worker_command(options: dict[str, Any]) -> list[str]:
    """The ``runworker`` arguments of each process a supervisor starts: the same as its own
    without ``--processes``."""
    args = ["runworker", *options["queues"]]
    for alias in options["backend"] or ():
        args += ["--backend", alias]
    valued = {
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
