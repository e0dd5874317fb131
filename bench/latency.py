#!/usr/bin/env python
"""Pickup latency under a steady load, for us and the peers (not a test).

    .venv/bin/python bench/latency.py [--phase-seconds 300] [--peer-phase-seconds S]
                                      [--pg-phase-seconds S] [--peak-n 20000] [--settle 60]
                                      [--loads 0.25,0.5,0.75] [--only KEY,...] [--no-write]
    .venv/bin/python bench/latency.py --render    # the plot again from bench/results/latency.json

Contenders: django-blamequeue on PostgreSQL (LISTEN/NOTIFY), on Redis and on SQLite (polling),
each as two default ``runworker`` processes (10 slots each); Procrastinate, Celery, RQ and
django-tasks-db as ``bench/peers.py`` runs them (their first worker setup, concurrency 10 where
they have one). One PostgreSQL (fsync on) and one Redis (AOF, ``appendfsync everysec``) from
``tests.servers`` on loopback, as in ``bench/peers.py``; each contender runs in a child process
(``bench/peerapps/paced.py``) with its own interpreter and database.

Per contender: its peak (a burst drain of ``--peak-n`` no-op jobs by the same workers), then a
phase of ``--phase-seconds`` at each fraction of it in ``--loads``, offered by a producer paced
by credit on wall-clock time. Latency is enqueue → start of the handler, from one clock: the
producer stamps ``time.time()`` into the job's arguments just before the enqueue call and the
handler's first act reports ``time.time()`` less that stamp (``bench/peerapps/probe.py``). Not
the job rows' own timestamps: only some libraries keep them, their "started" is the claim, not
the handler, and the peers stamp with different clocks; the handler's start is what a user
waits for, and it is measured alike for everyone (the enqueue's own commit included). Samples
go into an HDR-style histogram (``bench/hdr.py``, 0.4 % relative error, bounded memory).

Writes ``bench/results/latency.json`` and ``docs/img/latency.png``; docs/benchmarks.md shows
them (the prose there is written by hand).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.peerapps.harness import log  # noqa: E402
from bench.peers import CONTENDERS as PEERS  # noqa: E402
from bench.peers import VENV, machine, run_contender, server_facts, setup_venv  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "latency.json"
PLOT = ROOT / "docs" / "img" / "latency.png"

#: key -> (interpreter, env templates): ours on three engines, then the peers of peers.py.
CONTENDERS: dict[str, tuple[str, dict[str, str]]] = {
    "blamequeue-postgres": PEERS["blamequeue-postgres"],
    "blamequeue-redis": PEERS["blamequeue-redis"],
    "blamequeue-sqlite": ("project", {"BENCH_DATABASE_URL": "sqlite:///{base}/bq.sqlite3"}),
    "procrastinate": PEERS["procrastinate"],
    "celery": PEERS["celery"],
    "rq": PEERS["rq"],
    "django-tasks-db": PEERS["django-tasks-db"],
}
DATABASES = ("bq_postgres", "bq_redis", "procrastinate", "tasksdb", "celery_orm")


def run_all(args: argparse.Namespace, keys: list[str], report: dict[str, Any]) -> None:
    from tests.servers import PostgresServer, RedisServer

    with tempfile.TemporaryDirectory(prefix="bq-latency-", dir=ROOT / ".tmp") as tmp:
        base = Path(tmp)
        base.chmod(0o755)  # traversable by the PostgreSQL user when this runs as root
        logdir = VENV.parent / "latency-logs"  # kept after the run: the workers' output
        shutil.rmtree(logdir, ignore_errors=True)
        logdir.mkdir(parents=True)
        (base / "celery").mkdir()
        pg = PostgresServer(base / "pg")
        rd = RedisServer(base / "redis", appendonly="everysec")
        pg.start()
        try:
            rd.start()
            import psycopg

            with psycopg.connect(pg.url, autocommit=True) as conn:
                for name in DATABASES:
                    conn.execute(f"CREATE DATABASE {name}")
            report["servers"] = server_facts(pg.url, rd.url)
            urls = {"pg": pg.url.rsplit("/", 1)[0], "redis": rd.url.rsplit("/", 1)[0]}
            urls["base"] = str(base)
            clean = {
                k: v for k, v in os.environ.items() if not k.startswith(("BENCH_", "BLAMEQUEUE_"))
            }
            for key in keys:
                interpreter, templates = CONTENDERS[key]
                ours = interpreter == "project"
                seconds = args.phase_seconds if ours else args.peer_phase_seconds
                if key == "blamequeue-postgres" and args.pg_phase_seconds:
                    seconds = args.pg_phase_seconds
                cfg = {
                    "peak_n": args.peak_n if ours else args.peer_peak_n,
                    "loads": [float(x) for x in args.loads.split(",")],
                    "phase_seconds": seconds,
                    "max_batch": args.max_batch,
                    "settle_s": args.settle,
                    "concurrency": 10,
                    "drain_timeout": 900,
                    "logdir": str(logdir),
                }
                env = {
                    **clean,
                    **{k: v.format(**urls) for k, v in templates.items()},
                    "BENCH_PG_PID": str(pg.pid),
                    "BENCH_REDIS_PID": str(rd.pid),
                    "PYTHONPATH": str(ROOT),
                    **({"BENCH_LISTEN": "0"} if args.no_listen else {}),
                }
                python = sys.executable if ours else str(VENV / "bin" / "python")
                log(f"{key}: phases of {seconds:g} s (load average {os.getloadavg()[0]:.1f})")
                pids = [pid for pid in (pg.pid, rd.pid) if pid]
                out = run_contender(key, python, env, cfg, pids, "bench.peerapps.paced")
                out["phase_seconds"] = seconds
                report["contenders"].append(out)
        finally:
            rd.stop()
            pg.stop()


def table(report: dict[str, Any]) -> str:
    from bench.drain import text_table

    rows = []
    for c in report["contenders"]:
        if "error" in c:
            rows.append((c.get("label", c["key"]), "error", c["error"][:60], *[""] * 8))
            continue
        for p in c["phases"]:
            lat = p["latency_ms"]
            rows.append(
                (
                    c["label"],
                    f"{p['load']:.0%} of {c['peak']['rate']:,.0f}/s",
                    f"{p['offered_rate']:,.0f} / {p['sent_rate']:,.0f} / {p['served_rate']:,.0f}",
                    f"{p['seconds']:.0f}",
                    f"{lat['p50']:.2f}",
                    f"{lat['p95']:.2f}",
                    f"{lat['p99']:.2f}",
                    f"{lat['max']:.1f}",
                    f"{p['depth_mean']:.1f} / {p['depth_max']}",
                    f"{c['loadavg_start'][0]:.1f}→{c['loadavg_end'][0]:.1f}",
                    "" if p["settled"] else "backlog left",
                )
            )
    header = (
        "contender",
        "load",
        "offered / sent / served per s",
        "s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "depth mean / max",
        "load avg",
        "",
    )
    return text_table(header, rows)


def write_plot(report: dict[str, Any]) -> None:
    """p50 (solid) and p99 (dashed) against offered load, one colour per contender."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(13, 6))
    for i, c in enumerate(x for x in report["contenders"] if "phases" in x):
        color = plt.get_cmap("tab10")(i)
        loads = [100 * p["load"] for p in c["phases"]]
        label = f"{c['label']} (peak {c['peak']['rate']:,.0f}/s, {c['phase_seconds']:g} s phases)"
        width = 2.5 if c["key"].startswith("blamequeue") else 1.2
        for q, style in (("p50", "-"), ("p99", "--")):
            ys = [p["latency_ms"][q] for p in c["phases"]]
            ax.plot(
                loads,
                ys,
                style,
                marker="o",
                color=color,
                lw=width,
                label=f"{label}" if q == "p50" else None,
            )
    ax.set_yscale("log")
    ax.set_xlabel("offered load (% of the contender's own measured peak)")
    ax.set_ylabel("enqueue → handler start (ms, log scale); solid p50, dashed p99")
    ax.axhline(10, color="grey", lw=0.8, ls=":")
    ax.axhline(3, color="grey", lw=0.8, ls=":")
    loads = {100 * p["load"] for c in report["contenders"] for p in c.get("phases", [])}
    ax.set_xticks(sorted(loads))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    m = report["machine"]
    ax.set_title(
        f"Pickup latency under a paced load · {m['nproc']} shared CPUs ({m['cpu']}) · "
        f"{report['finished']}",
        fontsize=9,
    )
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--phase-seconds", type=float, default=300, help="ours (300)")
    parser.add_argument("--peer-phase-seconds", type=float, help="the peers' (as ours)")
    parser.add_argument(
        "--pg-phase-seconds", type=float, help="ours on PostgreSQL (as --phase-seconds)"
    )
    parser.add_argument("--loads", default="0.25,0.5,0.75", help="fractions of the peak")
    parser.add_argument("--peak-n", type=int, default=20000, help="jobs of the peak drain")
    parser.add_argument(
        "--peer-peak-n", type=int, default=3000, help="the peers' peak drain (RQ does 40/s)"
    )
    parser.add_argument("--max-batch", type=int, default=100, help="most jobs owed in one call")
    parser.add_argument("--settle", type=float, default=60, help="s for a phase's backlog")
    parser.add_argument(
        "--no-listen", action="store_true", help="ours on PostgreSQL poll (LISTEN off)"
    )
    parser.add_argument("--only", default="", help="comma-separated contender keys")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the saved contenders this run does not measure (a rerun of one of them)",
    )
    parser.add_argument("--render", action="store_true", help="the plot from the saved JSON")
    args = parser.parse_args(argv)
    if args.render:
        report = json.loads(RESULTS.read_text())
        print(table(report))
        write_plot(report)
        return 0
    if args.peer_phase_seconds is None:
        args.peer_phase_seconds = args.phase_seconds
    keys = [k for k in CONTENDERS if not args.only or k in args.only.split(",")]
    if any(CONTENDERS[k][0] == "peers" for k in keys):
        setup_venv()
    report: dict[str, Any] = {
        "command": ["bench/latency.py " + " ".join(argv if argv is not None else sys.argv[1:])],
        "machine": machine(),
        "contenders": [],
    }
    started = time.perf_counter()
    (ROOT / ".tmp").mkdir(exist_ok=True)
    run_all(args, keys, report)
    report["elapsed_s"] = time.perf_counter() - started
    report["finished"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(table(report))
    if args.merge and RESULTS.exists():
        saved = json.loads(RESULTS.read_text())
        ran = {c["key"] for c in report["contenders"]}
        kept = [c for c in saved["contenders"] if c["key"] not in ran]
        report["contenders"] = sorted(
            kept + report["contenders"], key=lambda c: list(CONTENDERS).index(c["key"])
        )
        before = saved["command"]
        report["command"] = [*([before] if isinstance(before, str) else before), *report["command"]]
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(report, indent=1, default=str) + "\n")
        write_plot(report)
        print(f"\nwrote {RESULTS.relative_to(ROOT)}, {PLOT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
