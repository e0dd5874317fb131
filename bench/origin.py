#!/usr/bin/env python
"""What recording the call site of each enqueue costs (``JobInfo.origin["site"]``).

    .venv/bin/python bench/origin.py [--db sqlite|postgres|both] [--rounds 9] [--single 2000]
                                     [--block 50] [--batches 30] [--batch 1000] [--no-write]

Single enqueues and ``enqueue_many`` batches, with ``ORIGIN_SITE`` on and off alternating
block by block within each round (on, off, off, on, ...: whatever the shared machine does
meanwhile hits both arms alike), each round on an emptied job table. Each arm's rate is the
median of the rounds; the overhead, the median of the rounds' own ``1 - on / off``. Also the
cost of one ``origin.capture()`` itself, from a stack as deep as a view's call into
``queue.enqueue``. PostgreSQL is a throwaway server
(``tests.servers``, fsync on); SQLite a fresh file configured as ``testproject`` does.

Writes ``bench/results/origin.json`` and the part of ``docs/benchmarks.md`` between the
``bench:origin`` markers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results" / "origin.json"
BEGIN, END = "<!-- bench:origin:begin -->", "<!-- bench:origin:end -->"
TARGET = 0.05  # the bound on the overhead


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ the child
def child(cfg: dict[str, Any]) -> dict[str, Any]:
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from django_blamequeue import conf, queue
    from django_blamequeue.jobs import origin

    call_command("migrate", verbosity=0)
    # The two configurations, built (and validated) once; switching is one assignment, so
    # the arms differ in the setting alone.
    arms = {}
    for on in (True, False):
        settings.BLAMEQUEUE = {**settings.BLAMEQUEUE, "ORIGIN_SITE": on}
        conf.reset()
        arms[on] = conf.get_settings()

    def site_capture(on: bool) -> None:
        conf._cached = arms[on]

    def empty() -> None:
        with connection.cursor() as cur:
            cur.execute("DELETE FROM blamequeue_job")

    def view_like(depth: int, call: Any) -> Any:
        """A few frames of user code above the call, as in a view (middleware, dispatch)."""
        return call() if depth == 0 else view_like(depth - 1, call)

    block = cfg["block"]
    payloads = [{"i": i} for i in range(cfg["batch"])]

    def single() -> int:
        for i in range(block):
            view_like(3, lambda i=i: queue.enqueue("bench", {"i": i}))
        return block

    def many() -> int:
        view_like(3, lambda: queue.enqueue_many("bench", payloads))
        return len(payloads)

    def round_of(measure: Any, blocks: int) -> dict[str, float]:
        """``blocks`` blocks per arm, the arms alternating block by block (on off off on …):
        whatever the machine does meanwhile, both arms get their share of it."""
        took = {"on": 0.0, "off": 0.0}
        jobs = {"on": 0, "off": 0}
        for b in range(2 * blocks):
            arm = ("on", "off", "off", "on")[b % 4]
            site_capture(arm == "on")
            start = time.perf_counter()
            jobs[arm] += measure()
            took[arm] += time.perf_counter() - start
        return {arm: jobs[arm] / took[arm] for arm in took}

    rates: dict[str, dict[str, list[float]]] = {
        "single": {"on": [], "off": []},
        "many": {"on": [], "off": []},
    }
    site_capture(True)
    single(), many()  # warm-up: connections, statement caches, the site cache
    empty()
    for _ in range(cfg["rounds"]):
        for name, measure, blocks in (
            ("single", single, cfg["single"] // block),
            ("many", many, cfg["batches"]),
        ):
            for arm, rate in round_of(measure, blocks).items():
                rates[name][arm].append(rate)
            empty()
    capture: dict[str, float] = {}
    for arm in ("on", "off"):
        site_capture(arm == "on")
        loops = 20_000
        took = min(timeit.repeat(lambda: view_like(3, origin.capture), number=loops, repeat=5))
        capture[arm] = took / loops * 1e6
    site_capture(True)
    sample = view_like(3, origin.capture)
    return {"rates": rates, "capture_us": capture, "sample": sample, "vendor": connection.vendor}


# ----------------------------------------------------------------------------- the driver
def run_child(url: str, cfg: dict[str, Any]) -> dict[str, Any]:
    env = {
        **os.environ,
        "BENCH_DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(cfg)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"the run on {url} failed (exit {proc.returncode})")
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """Per arm the median of the rounds' rates; the overhead is the median of the rounds'
    own ``1 - on / off`` (each round's arms ran interleaved, block by block)."""
    out: dict[str, Any] = {}
    for name, arms in result["rates"].items():
        on, off = statistics.median(arms["on"]), statistics.median(arms["off"])
        ratios = [1 - a / b for a, b in zip(arms["on"], arms["off"], strict=True)]
        out[name] = {"on": on, "off": off, "overhead": statistics.median(ratios)}
    return out


def rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    table = []
    labels = {"single": "single enqueue, 1 thread", "many": "enqueue_many (batches)"}
    for db, result in report["results"].items():
        s = summary(result)
        for name in ("single", "many"):
            m = s[name]
            verdict = "met" if m["overhead"] <= TARGET else "missed"
            table.append(
                (
                    f"{labels[name]}, {db}",
                    f"{m['on']:,.0f}",
                    f"{m['off']:,.0f}",
                    f"{m['overhead'] * 100:+.1f} %",
                    f"≤ 5 %: {verdict}",
                )
            )
    return table


HEADER = ("measurement (jobs/s)", "site on", "site off", "overhead", "target")


def markdown(report: dict[str, Any]) -> str:
    lines = [
        BEGIN,
        f"<!-- written by bench/origin.py on {report['finished']}; edit outside the markers -->",
        "",
        f"Run of {report['finished']} (`bench/origin.py {report['argv']}`, "
        f"{report['elapsed_s']:.0f} s).",
        "",
        f"- Machine: {report['machine']}; load average {report['load'][0]:.1f} at the start "
        f"and {report['load'][1]:.1f} at the end (other processes share this machine).",
        f"- {report['cfg']['rounds']} rounds, each on an emptied table: per arm "
        f"{report['cfg']['single']:,} single enqueues in blocks of {report['cfg']['block']} and "
        f"{report['cfg']['batches']} `enqueue_many` calls of {report['cfg']['batch']:,} jobs, "
        "the arms alternating block by block (on, off, off, on, …). Rates: the median of the "
        "rounds; overhead: the median of the rounds' own `1 - on/off`. The enqueues are called "
        "from 4 frames of user code, as from a view.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
        *("| " + " | ".join(r) + " |" for r in rows(report)),
        "",
    ]
    for db, result in report["results"].items():
        us = result["capture_us"]
        lines.append(
            f"One `origin.capture()` ({db} run): {us['on']:.1f} µs with the site, "
            f"{us['off']:.1f} µs without; it runs once per enqueue call, whatever the batch."
        )
    sample = next(iter(report["results"].values()))["sample"]
    lines += ["", f"What it records: `{json.dumps(sample)}`.", "", END]
    return "\n".join(lines)


def write_doc(report: dict[str, Any]) -> None:
    text = DOC.read_text()
    section = markdown(report)
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## The blame trail's cost\n\n" + section + "\n"
    DOC.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=9, help="rounds")
    parser.add_argument("--single", type=int, default=2000, help="single enqueues per arm, round")
    parser.add_argument("--block", type=int, default=50, help="single enqueues per block")
    parser.add_argument("--batches", type=int, default=30, help="enqueue_many calls per arm")
    parser.add_argument("--batch", type=int, default=1000, help="jobs per enqueue_many call")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument("--child", metavar="CONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    cfg = {k: getattr(args, k) for k in ("rounds", "single", "block", "batches", "batch")}
    started = time.perf_counter()
    report: dict[str, Any] = {
        "cfg": cfg,
        "argv": " ".join(sys.argv[1:]) or "(defaults)",
        "machine": f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
        "results": {},
    }
    load_start = os.getloadavg()[0]
    dbs = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    with tempfile.TemporaryDirectory(prefix="bq-origin-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)  # the PostgreSQL user must reach its data directory
        if "sqlite" in dbs:
            log("SQLite: fresh database file")
            report["results"]["sqlite"] = run_child(f"sqlite:///{base / 'o.sqlite3'}", cfg)
        if "postgres" in dbs:
            from tests.servers import PostgresServer

            server = PostgresServer(base / "pg")
            log("PostgreSQL: starting a throwaway server (fsync on)")
            server.start()
            try:
                import psycopg

                with psycopg.connect(server.url, autocommit=True) as conn:
                    conn.execute("CREATE DATABASE bench")
                report["results"]["postgres"] = run_child(
                    server.url.rsplit("/", 1)[0] + "/bench", cfg
                )
            finally:
                server.stop()
    report["elapsed_s"] = time.perf_counter() - started
    report["load"] = (load_start, os.getloadavg()[0])
    report["finished"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    width = [max(len(r[i]) for r in [HEADER, *rows(report)]) for i in range(len(HEADER))]
    for r in [HEADER, *rows(report)]:
        print("  ".join(c.ljust(w) for c, w in zip(r, width, strict=True)))
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(report, indent=2) + "\n")
        write_doc(report)
        print(f"\nwrote {RESULTS.relative_to(ROOT)} and {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
