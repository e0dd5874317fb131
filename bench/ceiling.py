#!/usr/bin/env python
"""How close to the hardware: django-blamequeue against raw psycopg on the same server (not a test).

    .venv/bin/python bench/ceiling.py [--scenarios ceiling,single] [--n 20000] [--single-n 5000]
                                      [--concurrency 64] [--ideal-batch 50] [--rounds 2]
                                      [--py-spy DIR] [--pg-stats N] [--no-write]

One throwaway PostgreSQL 15 (``tests.servers``, fsync on, loopback) for the whole run; in each
round the two sides of a scenario run one after the other (the order reversed every other
round), so they share the server, the machine and its load, and the ratio is what counts.

``ceiling`` (no-op jobs): N jobs enqueued with ``queue.enqueue_many``, drained by 2 ×
``manage.py runworker bench --no-sweep --concurrency 64 --burst`` (``bench.settings``: library
defaults, JSON payloads), from the first claim to the last ack as the rows record them; against
``ideal_pg.py`` (``/work/shared/bench/``: 2 processes of raw psycopg, one fenced ``FOR UPDATE
SKIP LOCKED`` claim of B=50 and one fenced ack per batch, each statement its own commit) on N
jobs in a database of its own on the same server, timed the same way (first claim, read back as
``lease_until − 30 s``, to the last ``finished_at``); ``ideal_pg.py``'s own wall-clock rate,
process start included, is shown too.

``single``: ``queue.enqueue(...)`` N times from one thread, each call its own transaction
(autocommit), against a raw psycopg loop of ``INSERT … ; COMMIT`` into ``bench_raw_job``, a
table made with ``CREATE TABLE … (LIKE blamequeue_job INCLUDING ALL)`` (the same columns,
defaults, indexes and constraints), with the values one enqueue stores; and, for information,
the same loop whose INSERT also sends a NOTIFY, as an enqueue's does (the ratio against it
shows what the NOTIFY costs and what the rest of the library does).

Prints each round and a summary with the ratios against the targets (ceiling ≥ 50 %,
single ≥ 80 %); writes ``bench/results/ceiling.json`` unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import statistics
import subprocess
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
from bench.throughput import children_cpu, postgres_cpu  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "ceiling.json"
SETTINGS = "bench.settings"
IDEAL = Path("/work/shared/bench/ideal_pg.py")
#: Targets: ceiling ≥ 50 % of ideal_pg.py at B=50; single enqueue ≥ 80 % of INSERT+COMMIT.
TARGETS = {"ceiling": 0.50, "single": 0.80}

log = drain.logger("ceiling")


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ------------------------------------------------------------------------ ceiling
def blamequeue_drain(
    args: argparse.Namespace, pg: drain.Cluster, logdir: Path, tag: str, startups: dict[Any, float]
) -> dict[str, Any]:
    from bench.jobs import NOOP

    env = {"DJANGO_SETTINGS_MODULE": SETTINGS}
    startup = drain.startup_cpu(args.concurrency, env, logdir, startups)
    drain.reset_jobs()
    drain.enqueue_bulk(NOOP, args.n)
    workers = drain.Workers(
        args.workers, concurrency=args.concurrency, burst=True, env=env, logdir=logdir, tag=tag
    )
    return drain.Drain(
        args.n,
        workers,
        pg_pid=pg.pid,
        log=log,
        startup_cpu=startup,
        timeout=args.timeout,
        py_spy=args.py_spy,
        pg_stats=args.pg_stats,
    ).run()


def ideal_drain(args: argparse.Namespace, pg: drain.Cluster, url: str, tag: str) -> dict[str, Any]:
    """``ideal_pg.py`` on ``url``: its printed rate, and the window read back from ``q``."""
    import psycopg

    env = {
        **os.environ,
        "DATABASE_URL": url,
        "N": str(args.n),
        "B": str(args.ideal_batch),
        "P": str(args.workers),
    }

    def wal() -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])  # type: ignore[index]

    if args.pg_stats:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")
    wal0 = wal()
    cpu0, pg0 = children_cpu(), postgres_cpu(pg.pid)
    proc = subprocess.run(
        [sys.executable, str(args.ideal)],
        env=env,
        capture_output=True,
        text=True,
        timeout=args.timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{args.ideal} failed: {proc.stderr.strip()[-500:]}")
    cpu, server = children_cpu() - cpu0, postgres_cpu(pg.pid) - pg0
    printed = next(
        float(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("RATE")
    )
    wal_bytes = wal() - wal0
    with psycopg.connect(url, autocommit=True) as conn:
        ((jobs, first, last, claims, acks),) = conn.execute(
            "SELECT count(*), min(lease_until) - interval '30 seconds', max(finished_at), "
            "count(DISTINCT lease_until), count(DISTINCT finished_at) FROM q WHERE state = 'done'"
        ).fetchall()
        time.sleep(0.6)  # the exited backends' table counters reach the statistics
        ((updated, hot),) = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'q'"
        ).fetchall()
    if jobs != args.n:
        raise RuntimeError(f"ideal_pg.py left {jobs} of {args.n} jobs done")
    seconds = (last - first).total_seconds()
    out = {
        "jobs": jobs,
        "seconds": seconds,
        "rate": jobs / seconds,
        "printed_rate": printed,
        "batch": args.ideal_batch,
        "claim_batch": jobs / max(claims, 1),
        "ack_batch": jobs / max(acks, 1),
        # Its CPU includes the COPY of the N rows (small next to the drain) and its start-up.
        "worker_cpu_us": 1e6 * cpu / jobs,
        "pg_cpu_us": 1e6 * server / jobs,
        "wal_bytes_per_job": wal_bytes / jobs,  # its COPY of the N rows included
        "updates_per_job": updated / jobs,
        "hot_update_share": hot / updated if updated else 0.0,
    }
    if args.pg_stats:
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT total_exec_time, total_plan_time, calls, rows, query "
                "FROM pg_stat_statements "
                "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "ORDER BY total_exec_time + total_plan_time DESC LIMIT %s",
                [args.pg_stats],
            ).fetchall()
        out["pg_statements"] = {
            "exec_us_per_job": 1000 * sum(float(r[0]) for r in rows) / jobs,
            "plan_us_per_job": 1000 * sum(float(r[1]) for r in rows) / jobs,
            "calls_per_job": sum(r[2] for r in rows) / jobs,
            "top": [
                {
                    "us_per_job": 1000 * float(ms) / jobs,
                    "plan_us_per_job": 1000 * float(pms) / jobs,
                    "calls_per_job": c / jobs,
                    "rows": n,
                    "mean_us": 1000 * float(ms) / max(c, 1),
                    "mean_plan_us": 1000 * float(pms) / max(c, 1),
                    "query": " ".join(q.split()),
                }
                for ms, pms, c, n, q in rows
            ],
        }
    log(
        f"{tag}: ideal_pg.py B={args.ideal_batch}: {out['rate']:,.0f}/s first claim to last ack "
        f"({printed:,.0f}/s as it prints it, start-up included; CPU {out['worker_cpu_us']:,.0f} "
        f"+ {out['pg_cpu_us']:,.0f} µs/job; {out['wal_bytes_per_job']:,.0f} WAL bytes/job with its "
        f"COPY, {100 * out['hot_update_share']:.0f} % HOT updates)"
    )
    return out


# ------------------------------------------------------------------------ single enqueue
RAW_TABLE = "bench_raw_job"
RAW_INSERT = f"""
INSERT INTO {RAW_TABLE} (id, queue, name, state, payload, content_type, content_encoding,
    priority, available_at, attempts, max_attempts, stalls, cancel_requested, progress,
    trace_id, flow_depth, snoozes, unique_calls, created_at, updated_at)
VALUES (%s, %s, %s, 'pending', %s, 'application/json', 'utf-8', 0, now(), 0, 3, 0, false, 0,
    %s, 0, 0, 0, now(), now())"""


RAW_INSERT_NOTIFY = f"""
INSERT INTO {RAW_TABLE} (id, queue, name, state, payload, content_type, content_encoding,
    priority, available_at, attempts, max_attempts, stalls, cancel_requested, progress,
    trace_id, flow_depth, snoozes, unique_calls, created_at, updated_at)
SELECT %s, %s, %s, 'pending', %s, 'application/json', 'utf-8', 0, now(), 0, 3, 0, false, 0,
    %s, 0, 0, 0, now(), now() FROM (SELECT pg_notify('bench_raw', 'bench')) AS n"""


def blamequeue_single(
    n: int, pg_pid: int | None, tag: str, pg_stats: int = 0, py_spy: Path | None = None
) -> dict[str, Any]:
    from bench import profiling
    from bench.jobs import NOOP, QUEUE
    from django_blamequeue import queue

    drain.reset_jobs()
    if pg_stats:
        drain.sql("SELECT pg_stat_statements_reset()")
    spy = profiling.Spy(py_spy, tag)
    spy.start(os.getpid(), 0)
    if py_spy:
        time.sleep(0.5)  # py-spy attached
    cpu0, pg0, t0 = own_cpu(), postgres_cpu(pg_pid), time.perf_counter()
    for i in range(n):
        queue.enqueue(QUEUE, {"i": i}, name=NOOP)
    seconds = time.perf_counter() - t0
    recorded = spy.stop(interrupt=True)
    out = {
        "jobs": n,
        "seconds": seconds,
        "rate": n / seconds,
        "client_cpu_us": 1e6 * (own_cpu() - cpu0) / n,
        "pg_cpu_us": 1e6 * (postgres_cpu(pg_pid) - pg0) / n,
    }
    # The shape of what was stored, so the raw loop can be checked against it.
    ((traced,),) = drain.sql("SELECT count(trace_id) FROM blamequeue_job")
    out["trace_ids"] = traced
    if pg_stats:
        out["pg_statements"] = profiling.statements(pg_stats, n)
    if recorded is not None:
        out["py_spy"] = profiling.summarize(recorded, n)
    log(
        f"{tag}: {n:,} × queue.enqueue: {out['rate']:,.0f}/s (client CPU "
        f"{out['client_cpu_us']:,.0f} µs, server {out['pg_cpu_us']:,.0f} µs per enqueue)"
    )
    return out


def raw_single(
    n: int, url: str, pg_pid: int | None, tag: str, notify: bool = False, pg_stats: int = 0
) -> dict[str, Any]:
    """``INSERT … ; COMMIT`` one row at a time with plain psycopg (TCP, as Django connects);
    with ``notify``, the INSERT also sends a NOTIFY, as an enqueue's does."""
    import psycopg

    from bench import profiling

    statement = RAW_INSERT_NOTIFY if notify else RAW_INSERT
    if pg_stats:
        drain.sql("SELECT pg_stat_statements_reset()")
    with psycopg.connect(url) as conn:
        conn.execute(f"TRUNCATE {RAW_TABLE}")
        conn.commit()
        cpu0, pg0, t0 = own_cpu(), postgres_cpu(pg_pid), time.perf_counter()
        for i in range(n):
            conn.execute(
                statement,
                (
                    secrets.token_hex(13).upper(),
                    "bench",
                    "bench.noop",
                    json.dumps({"i": i}).encode(),
                    secrets.token_hex(16),
                ),
            )
            conn.commit()
        seconds = time.perf_counter() - t0
    out = {
        "jobs": n,
        "seconds": seconds,
        "rate": n / seconds,
        "client_cpu_us": 1e6 * (own_cpu() - cpu0) / n,
        "pg_cpu_us": 1e6 * (postgres_cpu(pg_pid) - pg0) / n,
    }
    if pg_stats:
        out["pg_statements"] = profiling.statements(pg_stats, n)
    log(
        f"{tag}: {n:,} × raw INSERT{'+NOTIFY' if notify else ''}+COMMIT: {out['rate']:,.0f}/s "
        "(client CPU "
        f"{out['client_cpu_us']:,.0f} µs, server {out['pg_cpu_us']:,.0f} µs per insert)"
    )
    return out


# ------------------------------------------------------------------------ report
def ratio_line(name: str, rounds: list[dict[str, Any]], ours: str, theirs: str) -> dict[str, Any]:
    per_round = [r[ours]["rate"] / r[theirs]["rate"] for r in rounds]

    def cpu(x: dict[str, Any]) -> float:
        return float(x.get("worker_cpu_us", x.get("client_cpu_us", 0)) + x["pg_cpu_us"])

    # CPU per job, client + server, of each side's thriftiest round: what the rates would be
    # in proportion to when the machine's cores are the limit, whatever else ran meanwhile.
    cpu_ratio = min(cpu(r[theirs]) for r in rounds) / min(cpu(r[ours]) for r in rounds)
    best_ours = max(r[ours]["rate"] for r in rounds)
    best_theirs = max(r[theirs]["rate"] for r in rounds)
    return {
        "scenario": name,
        "ours": best_ours,
        "theirs": best_theirs,
        "ratio_best": best_ours / best_theirs,
        "ratio_rounds": per_round,
        "ratio_median": statistics.median(per_round),
        "cpu_ratio": cpu_ratio,
        "target": TARGETS.get(name),
    }


def summary_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    rows = []
    names = {
        "ceiling": (
            "no-op drain, 2 × 64 slots vs ideal_pg.py B=50",
            "blamequeue",
            "ideal",
        ),
        "single": ("single enqueue, 1 thread vs INSERT+COMMIT", "blamequeue", "raw"),
        "single_notify": (
            "single enqueue vs INSERT with NOTIFY+COMMIT (for information)",
            "blamequeue",
            "raw_notify",
        ),
    }
    for s in report["summary"]:
        title = names[s["scenario"]][0]
        if s["target"] is None:
            goal = ""
        else:
            met = s["ratio_median"] >= s["target"]
            goal = f"≥ {100 * s['target']:.0f} %: {'met' if met else 'missed'}"
        rows.append(
            (
                title,
                f"{s['ours']:,.0f}",
                f"{s['theirs']:,.0f}",
                f"{100 * s['ratio_best']:.0f} %",
                " · ".join(f"{100 * r:.0f} %" for r in s["ratio_rounds"]),
                f"{100 * s['ratio_median']:.0f} %",
                f"{100 * s['cpu_ratio']:.0f} %",
                goal,
            )
        )
    return rows


HEADER = (
    "scenario",
    "blamequeue/s (best)",
    "raw psycopg/s (best)",
    "best ÷ best",
    "per round",
    "median",
    "CPU/job: raw ÷ ours",
    "target (on the median)",
)


def cpu_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    rows = []
    for r in report["rounds"]:
        for key, who in (
            ("blamequeue", "blamequeue drain"),
            ("ideal", "ideal_pg.py"),
            ("single", "queue.enqueue"),
            ("raw", "INSERT+COMMIT"),
            ("raw_notify", "INSERT with NOTIFY+COMMIT"),
        ):
            if key not in r:
                continue
            x = r[key]
            client = x.get("worker_cpu_us", x.get("client_cpu_us"))
            rows.append(
                (
                    f"round {r['round']}: {who}",
                    f"{x['rate']:,.0f}",
                    f"{client:,.0f} + {x['pg_cpu_us']:,.0f}",
                    f"{x['claim_batch']:.1f} / {x['ack_batch']:.1f}" if "claim_batch" in x else "",
                    f"{x['wal_bytes_per_job']:,.0f}" if "wal_bytes_per_job" in x else "",
                    f"{100 * x['hot_update_share']:.0f} %" if "hot_update_share" in x else "",
                )
            )
    return rows


CPU_HEADER = (
    "side",
    "jobs/s",
    "CPU µs/job: client + server",
    "claim / ack",
    "WAL bytes/job",
    "HOT updates",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[2],
    )
    parser.add_argument(
        "--scenarios", default="ceiling,single", help="comma-separated: ceiling,single"
    )
    parser.add_argument("--n", type=int, default=20000, help="no-op jobs per drain (20000)")
    parser.add_argument("--single-n", type=int, default=5000, help="single enqueues (5000)")
    parser.add_argument("--concurrency", type=int, default=64, help="runworker slots (64)")
    parser.add_argument("--workers", type=int, default=2, help="processes on each side (2)")
    parser.add_argument("--ideal", type=Path, default=IDEAL, help=f"default {IDEAL}")
    parser.add_argument("--ideal-batch", type=int, default=50, help="ideal_pg.py's B (50)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds (2)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per drain")
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
        help="a statement run after the migration (repeatable), to try a lever on the schema, "
        "e.g. 'ALTER TABLE blamequeue_job SET (fillfactor = 70)'",
    )
    parser.add_argument(
        "--server-binding",
        action="store_true",
        help="a lever tried from the outside: Django's psycopg OPTIONS server_side_binding=True, "
        "prepare_threshold=5 (every statement prepared on its 5th run), driver and workers",
    )
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.name}")
    args = parser.parse_args(argv)
    scenarios = args.scenarios.split(",")
    if "ceiling" in scenarios and not args.ideal.exists():
        parser.error(f"{args.ideal} not found (--ideal)")

    report: dict[str, Any] = {**drain.report_head("ceiling.py", argv, args), "rounds": []}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bq-bench-ceiling-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)  # the PostgreSQL user must traverse it when this runs as root
        logdir = base / "logs"
        logdir.mkdir()
        log("starting a throwaway PostgreSQL (fsync on)")
        with drain.Cluster(base, stats=bool(args.pg_stats)) as pg:
            url = pg.create_database("bench")
            ideal_url = pg.create_database("ideal")
            report["server"] = pg.facts()
            if args.server_binding:
                os.environ["BENCH_SERVER_BINDING"] = "1"  # read by bench.settings, inherited
            drain.setup_django(url, SETTINGS)
            drain.alter(args.alter)
            drain.sql(f"CREATE TABLE {RAW_TABLE} (LIKE blamequeue_job INCLUDING ALL)")
            startups: dict[Any, float] = {}
            for r in range(args.rounds):
                row: dict[str, Any] = {"round": r + 1, "loadavg_start": os.getloadavg()}
                flip = r % 2 == 1
                tag = f"r{r + 1}"
                log(f"round {r + 1}/{args.rounds} (load {os.getloadavg()[0]:.1f})")
                if "ceiling" in scenarios:
                    sides = ["blamequeue", "ideal"]
                    for side in sides[::-1] if flip else sides:
                        if side == "blamequeue":
                            row[side] = blamequeue_drain(args, pg, logdir, f"drain-{tag}", startups)
                        else:
                            row[side] = ideal_drain(args, pg, ideal_url, f"ideal-{tag}")
                if "single" in scenarios:
                    sides = ["single", "raw", "raw_notify"]
                    for side in sides[::-1] if flip else sides:
                        if side == "raw_notify":
                            row[side] = raw_single(
                                args.single_n,
                                url,
                                pg.pid,
                                f"raw-notify-{tag}",
                                notify=True,
                                pg_stats=args.pg_stats,
                            )
                        elif side == "single":
                            row[side] = blamequeue_single(
                                args.single_n, pg.pid, f"single-{tag}", args.pg_stats, args.py_spy
                            )
                        else:
                            row[side] = raw_single(
                                args.single_n, url, pg.pid, f"raw-{tag}", pg_stats=args.pg_stats
                            )
                row["loadavg_end"] = os.getloadavg()
                report["rounds"].append(row)
    rounds = report["rounds"]
    report["summary"] = []
    if "ceiling" in scenarios:
        report["summary"].append(ratio_line("ceiling", rounds, "blamequeue", "ideal"))
    if "single" in scenarios:
        report["summary"].append(ratio_line("single", rounds, "single", "raw"))
        report["summary"].append(ratio_line("single_notify", rounds, "single", "raw_notify"))
    report["elapsed_s"] = time.perf_counter() - started
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["finished"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")

    for r in rounds:
        if "blamequeue" in r:
            print_profile(f"round {r['round']}: blamequeue drain", r["blamequeue"])
        if "ideal" in r:
            print_profile(f"round {r['round']}: ideal_pg.py", r["ideal"])
        if "single" in r:
            print_profile(f"round {r['round']}: queue.enqueue", r["single"])
        for side in ("raw", "raw_notify"):
            if side in r and "pg_statements" in r[side]:
                print_profile(f"round {r['round']}: {side}", r[side])
    m, srv = report["machine"], report["server"]
    print(
        f"\nPostgreSQL {srv['server_version'].split()[0]} fsync={srv['fsync']} "
        f"synchronous_commit={srv['synchronous_commit']}; {m['nproc']} CPUs, load average "
        f"{m['loadavg_start'][0]:.1f} → {m['loadavg_end'][0]:.1f}; N = {args.n:,} (drains), "
        f"{args.single_n:,} (single); {args.rounds} round(s); {report['elapsed_s']:.0f} s\n"
    )
    print(drain.text_table(CPU_HEADER, cpu_rows(report)))
    print()
    print(drain.text_table(HEADER, summary_rows(report)))
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(report, indent=1, default=str) + "\n")
        print(f"\nwrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
