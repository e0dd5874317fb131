#!/usr/bin/env python
"""Real jobs: each reads one row and writes one row through the Django ORM (not a test).

    .venv/bin/python bench/orm.py [--n 10000] [--concurrency 10,default] [--conn-max-age 0,none]
                                  [--pool] [--rounds 1] [--py-spy DIR] [--pg-stats N] [--no-write]

The job (``bench.ormapp.jobs.orm``) reads one ``Account`` by primary key and inserts one
``Entry`` (autocommit: the insert commits on its own). It runs on a throwaway PostgreSQL 15
(``tests.servers``, fsync on, loopback) with Django's default database settings, the library's
defaults (``bench.orm_settings`` = ``bench.settings`` + the ORM app) and 2 worker processes.

Every combination of ``--concurrency`` (a number, or ``default``: no ``--concurrency`` flag, the
command's own default) and ``--conn-max-age`` (the workers' ``CONN_MAX_AGE``: ``0`` is Django's
default, ``none`` keeps connections) is one setup; ``--pool`` adds ``CONN_MAX_AGE=0`` with
Django's psycopg pool (``OPTIONS["pool"]``). For each setup: ``queue.enqueue_many`` N jobs,
``ANALYZE``, then 2 × ``manage.py runworker bench --no-sweep [--concurrency K] --burst``, timed
from the first claim to the last ack as the database stamped them; every job's ``Entry`` is
checked. Also: worker and server CPU per job and the connections opened per job
(``pg_stat_database.sessions``). A table at the end; ``bench/results/orm.json`` unless
``--no-write``.
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
from bench.profiling import print_profile  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "orm.json"
SETTINGS = "bench.orm_settings"
#: The figures on this machine: 2 workers, --concurrency 10.
ISSUE_DEFAULT_AGE = 206.0  # CONN_MAX_AGE = 0 (Django's default)
ISSUE_PERSISTENT = 806.0  # CONN_MAX_AGE = None
TARGET = 3 * ISSUE_DEFAULT_AGE

log = drain.logger("orm")


def setups(args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    for c in args.concurrency.split(","):
        concurrency = None if c.strip() == "default" else int(c)
        for age in args.conn_max_age.split(","):
            out.append({"concurrency": concurrency, "conn_max_age": age.strip(), "pool": False})
        if args.pool:
            out.append({"concurrency": concurrency, "conn_max_age": "0", "pool": True})
    for s in out:
        s["key"] = f"c{s['concurrency'] or 'default'}-" + (
            "pool" if s["pool"] else f"age{s['conn_max_age']}"
        )
    return out


def label(s: dict[str, Any], banner: str | None = None) -> str:
    c = f"--concurrency {s['concurrency']}" if s["concurrency"] else "default concurrency"
    if s["concurrency"] is None and banner:
        c += f" ({banner})"
    age = {"0": "0 (Django's default)", "none": "None"}.get(s["conn_max_age"], s["conn_max_age"])
    return f"{c}, CONN_MAX_AGE={age}" + (", psycopg pool" if s["pool"] else "")


def run_setup(
    s: dict[str, Any],
    args: argparse.Namespace,
    pg_pid: int | None,
    logdir: Path,
    tag: str,
    startups: dict[Any, float],
) -> dict[str, Any]:
    from bench.ormapp import work
    from bench.ormapp.jobs import ORM

    env = {"DJANGO_SETTINGS_MODULE": SETTINGS, "BENCH_CONN_MAX_AGE": s["conn_max_age"]}
    if s["pool"]:
        env["BENCH_DB_POOL"] = "1"
    startup = drain.startup_cpu(s["concurrency"], env, logdir, startups)
    drain.reset_jobs()
    work.reset()
    t0 = time.perf_counter()
    drain.enqueue_bulk(ORM, args.n, args.batch)
    log(f"{tag}: {args.n:,} ORM jobs enqueued in {time.perf_counter() - t0:.1f} s")
    workers = drain.Workers(
        args.workers,
        concurrency=s["concurrency"],
        burst=True,
        env=env,
        logdir=logdir,
        tag=tag,
        code=s.get("code"),
    )
    result = drain.Drain(
        args.n,
        workers,
        pg_pid=pg_pid,
        log=log,
        startup_cpu=startup,
        timeout=args.timeout,
        py_spy=args.py_spy,
        pg_stats=args.pg_stats,
    ).run()
    written = work.entries()
    if written != args.n:
        raise RuntimeError(f"{tag}: {written} entries written for {args.n} jobs")
    result["startup_cpu_s"] = startup
    result["loadavg"] = os.getloadavg()
    return result


def summary_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    rows = []
    for s in report["setups"]:
        runs = s["runs"]
        best = max(runs, key=lambda r: r["rate"])
        rows.append(
            (
                label(s, best.get("concurrency_banner")),
                f"{best['rate']:,.0f}",
                " · ".join(f"{r['rate']:,.0f}" for r in runs),
                f"{best['rate'] / ISSUE_DEFAULT_AGE:.2f}×",
                f"{best['worker_cpu_us']:,.0f} + {best['pg_cpu_us'] or 0:,.0f}",
                f"{best['sessions_per_job']:.2f}",
                f"{best['claim_batch']:.1f} / {best['ack_batch']:.1f}",
                f"{best['wal_bytes_per_job']:,.0f}",
            )
        )
    return rows


HEADER = (
    "2 workers",
    "jobs/s (best)",
    "per round",
    "÷ 206/s",
    "CPU µs/job: workers + server",
    "connections/job",
    "claim / ack batch",
    "WAL bytes/job",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[2],
    )
    parser.add_argument("--n", type=int, default=10000, help="ORM jobs per drain (10000)")
    parser.add_argument(
        "--concurrency",
        default="10,default",
        help="comma-separated runworker --concurrency values; 'default' leaves the flag out",
    )
    parser.add_argument(
        "--conn-max-age",
        default="0,none",
        help="comma-separated CONN_MAX_AGE values for the workers: 0 (Django's default), none, "
        "or seconds (default 0,none)",
    )
    parser.add_argument(
        "--pool", action="store_true", help="also Django's psycopg pool (needs psycopg_pool)"
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    parser.add_argument("--batch", type=int, default=1000, help="enqueue_many batch size")
    parser.add_argument(
        "--rounds", type=int, default=1, help="rounds of every setup, order reversed every other"
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per drain")
    parser.add_argument(
        "--py-spy", type=Path, default=None, metavar="DIR", help="py-spy worker 0 into DIR"
    )
    parser.add_argument(
        "--pg-stats", type=int, default=0, metavar="N", help="print the N costliest statements"
    )
    parser.add_argument(
        "--alter",
        action="append",
        default=[],
        metavar="SQL",
        help="a statement run after the migration (repeatable), to try a lever on the schema",
    )
    parser.add_argument(
        "--server-binding",
        action="store_true",
        help="a lever tried from the outside: Django's psycopg OPTIONS server_side_binding=True, "
        "prepare_threshold=5 (every statement prepared on its 5th run), driver and workers",
    )
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.name}")
    args = parser.parse_args(argv)

    plan = setups(args)
    report: dict[str, Any] = {
        **drain.report_head("orm.py", argv, args),
        "setups": [{**s, "runs": []} for s in plan],
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bq-bench-orm-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)  # the PostgreSQL user must traverse it when this runs as root
        logdir = base / "logs"
        logdir.mkdir()
        log("starting a throwaway PostgreSQL (fsync on)")
        with drain.Cluster(base, stats=bool(args.pg_stats)) as pg:
            url = pg.create_database("bench")
            report["server"] = pg.facts()
            if args.server_binding:
                os.environ["BENCH_SERVER_BINDING"] = "1"  # read by bench.settings, inherited
            drain.setup_django(url, SETTINGS)
            drain.alter(args.alter)
            from bench.ormapp import work

            work.seed()
            startups: dict[Any, float] = {}
            for r in range(args.rounds):
                order = report["setups"] if r % 2 == 0 else report["setups"][::-1]
                for s in order:
                    tag = f"{s['key']}-r{r + 1}"
                    log(f"round {r + 1}/{args.rounds}: {label(s)} (load {os.getloadavg()[0]:.1f})")
                    s["runs"].append(run_setup(s, args, pg.pid, logdir, tag, startups))
    report["elapsed_s"] = time.perf_counter() - started
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["finished"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")

    for s in report["setups"]:
        for r in s["runs"]:
            print_profile(label(s), r)
    m, srv = report["machine"], report["server"]
    print(
        f"\nORM jobs (read one row, write one row), N = {args.n:,}, {args.workers} worker "
        f"processes; PostgreSQL {srv['server_version'].split()[0]} fsync={srv['fsync']} "
        f"synchronous_commit={srv['synchronous_commit']}; {m['nproc']} CPUs, load average "
        f"{m['loadavg_start'][0]:.1f} → {m['loadavg_end'][0]:.1f}; {report['elapsed_s']:.0f} s\n"
    )
    print(drain.text_table(HEADER, summary_rows(report)))
    defaults = [
        max(r["rate"] for r in s["runs"])
        for s in report["setups"]
        if s["conn_max_age"] == "0" and not s["pool"]
    ]
    if defaults:
        best = max(defaults)
        verdict = "met" if best >= TARGET else f"missed ({best / TARGET:.2f}× the target)"
        print(
            f"\ntarget, Django's default CONN_MAX_AGE=0: ≥ 3 × {ISSUE_DEFAULT_AGE:.0f} = "
            f"{TARGET:.0f} jobs/s; best here {best:,.0f}/s: {verdict} "
            f"(issue's figures at --concurrency 10: {ISSUE_DEFAULT_AGE:.0f}/s with "
            f"CONN_MAX_AGE=0, {ISSUE_PERSISTENT:.0f}/s with None)"
        )
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(report, indent=1, default=str) + "\n")
        print(f"\nwrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
