#!/usr/bin/env python
"""Soak: one worker runs a million no-op jobs, then ORM jobs; its memory and its pace over time.

    .venv/bin/python bench/soak.py [--noop 1000000] [--orm 200000] [--concurrency 16]
                                   [--interval 5] [--warmup 0.05] [--no-write]

One ``manage.py runworker bench --no-sweep --concurrency K`` process (``bench.orm_settings``:
library defaults, Django's default ``CONN_MAX_AGE=0``) on a throwaway PostgreSQL 15
(``tests.servers``, fsync on, loopback) runs ``--noop`` no-op jobs, then ``--orm`` ORM jobs
(read one row, write one row: ``bench/ormapp``). This process keeps the queue fed with
``queue.enqueue_many`` between ``--low`` and ``--high`` pending jobs (the ORM jobs are
enqueued once every no-op job is done), so the worker always has work and the table grows as
it would in production without the pruner (done rows stay).

Every ``--interval`` seconds it samples the worker's resident memory (``VmRSS`` in
``/proc/PID/status``) and CPU, and the jobs done (enqueued − pending − in flight), and prints a
progress line. At the end: RSS growth after warm-up (the first ``--warmup`` share of the no-op
jobs), and per phase the throughput of its last 10 % of jobs against its first 10 %, read from
the jobs' ``finished_at`` (goal: growth < 20 MB, last/first ≥ 0.90). Writes
``bench/results/soak.json`` (with every sample) unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import drain  # noqa: E402
from bench.throughput import _proc_cpu, machine  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "soak.json"
SETTINGS = "bench.orm_settings"
TARGET_RSS_MB = 20.0
TARGET_RATIO = 0.90

log = drain.logger("soak")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def open_jobs() -> int:
    """Pending + in flight: two partial-index counts, cheap next to a count of done rows."""
    ((n,),) = drain.sql(
        "SELECT (SELECT count(*) FROM blamequeue_job WHERE state = 'pending') + "
        "(SELECT count(*) FROM blamequeue_job WHERE state = 'inflight')"
    )
    return int(n)


class Soak:
    def __init__(self, args: argparse.Namespace, pid: int) -> None:
        self.args = args
        self.pid = pid
        self.enqueued = {"noop": 0, "orm": 0}
        self.samples: list[dict[str, Any]] = []
        self.t0 = time.perf_counter()

    def feed(self, phase: str, total: int, name: str) -> None:
        """Top the queue up to ``--high`` when it fell under ``--low``."""
        from django_blamequeue import queue

        waiting = open_jobs()
        if waiting >= self.args.low:
            return
        want = min(self.args.high - waiting, total - self.enqueued[phase])
        start = self.enqueued[phase]
        for k in range(start, start + want, 1000):
            queue.enqueue_many(
                drain.QUEUE, [{"i": i} for i in range(k, min(start + want, k + 1000))], name=name
            )
        self.enqueued[phase] += want

    def sample(self, phase: str, done: int, warm_rss: float | None) -> dict[str, Any]:
        now = time.perf_counter() - self.t0
        s = {
            "t": now,
            "phase": phase,
            "done": done,
            "rss_mb": rss_mb(self.pid),
            "cpu_s": _proc_cpu(self.pid, children=False),
        }
        prev = self.samples[-1] if self.samples else None
        rate = (done - prev["done"]) / (now - prev["t"]) if prev else 0.0
        cpu = 100 * (s["cpu_s"] - prev["cpu_s"]) / (now - prev["t"]) if prev else 0.0
        s["rate"] = rate
        self.samples.append(s)
        grown = f" ({s['rss_mb'] - warm_rss:+.1f} since warm-up)" if warm_rss is not None else ""
        total = self.args.noop + self.args.orm
        shown = f"{rate:,.0f}/s" if prev else "—/s"
        log(
            f"{now:7.0f} s  {phase:4} {done:,}/{total:,} done  {shown}  "
            f"RSS {s['rss_mb']:.1f} MB{grown}  worker CPU {cpu:.0f} %"
        )
        return s

    def run(self) -> dict[str, Any]:
        from bench.jobs import NOOP
        from bench.ormapp.jobs import ORM

        args = self.args
        warm_at = int(args.warmup * args.noop)
        warm_rss: float | None = None
        marks: dict[str, Any] = {}
        next_sample = 0.0
        for phase, total, name, offset in (
            ("noop", args.noop, NOOP, 0),
            ("orm", args.orm, ORM, args.noop),
        ):
            if not total:
                continue
            marks[phase] = {"start_t": time.perf_counter() - self.t0}
            while True:
                self.feed(phase, total, name)
                done = offset + self.enqueued[phase] - open_jobs()
                if time.perf_counter() - self.t0 >= next_sample or done >= offset + total:
                    s = self.sample(phase, done, warm_rss)
                    next_sample = s["t"] + args.interval
                    if warm_rss is None and done >= warm_at:
                        warm_rss = s["rss_mb"]
                        marks["warm"] = s
                if done >= offset + total:
                    break
                if time.perf_counter() - self.t0 > args.timeout:
                    raise RuntimeError(f"not done after {args.timeout:.0f} s")
                time.sleep(0.2)
            marks[phase]["end"] = self.samples[-1]
        return marks


def decile_rates(offset: int, total: int) -> dict[str, float]:
    """Throughput of a phase's first and last 10 % of jobs, by the order they finished in (the
    phases ran one after the other, so the phase's jobs are finished rows offset..offset+total)."""

    def finished(k: int) -> datetime:
        ((at,),) = drain.sql(
            "SELECT finished_at FROM blamequeue_job WHERE state = 'done' "
            "ORDER BY finished_at OFFSET %s LIMIT 1",
            [offset + k],
        )
        return at  # type: ignore[no-any-return]

    tenth = max(1, total // 10)
    first = tenth / max((finished(tenth) - finished(0)).total_seconds(), 1e-6)
    last = tenth / max((finished(total - 1) - finished(total - 1 - tenth)).total_seconds(), 1e-6)
    whole = total / max((finished(total - 1) - finished(0)).total_seconds(), 1e-6)
    return {"first_10": first, "last_10": last, "ratio": last / first, "mean": whole}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[2],
    )
    parser.add_argument("--noop", type=int, default=1_000_000, help="no-op jobs (1,000,000)")
    parser.add_argument("--orm", type=int, default=200_000, help="ORM jobs after them (200,000)")
    parser.add_argument(
        "--concurrency",
        default="16",
        help="runworker --concurrency, or 'default' for none (default 16)",
    )
    parser.add_argument(
        "--conn-max-age", default="0", help="the worker's CONN_MAX_AGE (0: Django's default)"
    )
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument(
        "--warmup", type=float, default=0.05, help="share of the no-op jobs before the RSS base"
    )
    parser.add_argument("--low", type=int, default=5000, help="top the queue up under this")
    parser.add_argument("--high", type=int, default=20000, help="… to this many open jobs")
    parser.add_argument("--sweep", action="store_true", help="run the worker's sweepers too")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds for the run")
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.name}")
    args = parser.parse_args(argv)
    concurrency = None if args.concurrency == "default" else int(args.concurrency)

    report: dict[str, Any] = {
        "command": "bench/soak.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "config": vars(args),
        "machine": machine(),
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bq-bench-soak-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)  # the PostgreSQL user must traverse it when this runs as root
        logdir = base / "logs"
        logdir.mkdir()
        log("starting a throwaway PostgreSQL (fsync on)")
        with drain.Cluster(base) as pg:
            url = pg.create_database("bench")
            report["server"] = pg.facts()
            drain.setup_django(url, SETTINGS)
            from bench.ormapp import work

            work.seed()
            env = {"DJANGO_SETTINGS_MODULE": SETTINGS, "BENCH_CONN_MAX_AGE": args.conn_max_age}
            workers = drain.Workers(
                1,
                concurrency=concurrency,
                burst=False,
                env=env,
                logdir=logdir,
                tag="soak",
                sweep=args.sweep,
            )
            with workers as w:
                report["worker_command"] = w.shown
                soak = Soak(args, w.procs[0].pid)
                marks = soak.run()
                report["concurrency_banner"] = w.banner_value("concurrency")
            report["samples"] = soak.samples
            counts = dict(drain.sql("SELECT state, count(*) FROM blamequeue_job GROUP BY state"))
            if counts.get("done") != args.noop + args.orm or len(counts) != 1:
                raise RuntimeError(f"the soak left {counts}")
            if args.orm and work.entries() != args.orm:
                raise RuntimeError(f"{work.entries()} entries for {args.orm} ORM jobs")
            phases = {}
            if args.noop:
                phases["noop"] = decile_rates(0, args.noop)
            if args.orm:
                phases["orm"] = decile_rates(args.noop, args.orm)
    report["phases"] = phases
    report["elapsed_s"] = time.perf_counter() - started
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["finished"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")

    samples = report["samples"]
    warm = marks.get("warm", samples[0])
    end = samples[-1]
    report["rss"] = {
        "warm_mb": warm["rss_mb"],
        "end_mb": end["rss_mb"],
        "max_mb": max(s["rss_mb"] for s in samples),
        "growth_mb": end["rss_mb"] - warm["rss_mb"],
        "noop_end_mb": marks["noop"]["end"]["rss_mb"] if "noop" in marks else None,
    }
    rss = report["rss"]
    m = report["machine"]
    print(
        f"\nsoak: 1 worker (`{report['worker_command']}`, concurrency "
        f"{report['concurrency_banner']}), {args.noop:,} no-op then {args.orm:,} ORM jobs, "
        f"CONN_MAX_AGE={args.conn_max_age}; {m['nproc']} CPUs, load average "
        f"{m['loadavg_start'][0]:.1f} → {m['loadavg_end'][0]:.1f}; {report['elapsed_s']:.0f} s\n"
    )
    rows = []
    for phase, r in phases.items():
        verdict = "met" if r["ratio"] >= TARGET_RATIO else "missed"
        rows.append(
            (
                {"noop": "no-op", "orm": "ORM"}[phase],
                f"{args.noop if phase == 'noop' else args.orm:,}",
                f"{r['mean']:,.0f}",
                f"{r['first_10']:,.0f}",
                f"{r['last_10']:,.0f}",
                f"{r['ratio']:.2f} (≥ {TARGET_RATIO:.2f}: {verdict})",
            )
        )
    print(
        drain.text_table(
            ("phase", "jobs", "jobs/s", "first 10 %/s", "last 10 %/s", "last ÷ first"), rows
        )
    )
    verdict = "met" if rss["growth_mb"] < TARGET_RSS_MB else "missed"
    print(
        f"\nRSS: {rss['warm_mb']:.1f} MB after warm-up ({int(args.warmup * args.noop):,} jobs), "
        f"{rss['noop_end_mb'] or 0:.1f} MB at the end of the no-op phase, {rss['end_mb']:.1f} MB "
        f"at the end (max {rss['max_mb']:.1f}): growth {rss['growth_mb']:+.1f} MB "
        f"(< {TARGET_RSS_MB:.0f} MB: {verdict})"
    )
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(report, indent=1, default=str) + "\n")
        print(f"\nwrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
