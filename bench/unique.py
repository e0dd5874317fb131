#!/usr/bin/env python
"""What a unique job costs at enqueue, against a plain enqueue in the same run.

    .venv/bin/python bench/unique.py [--engine sqlite|postgres|redis|sqs|all] [--rounds 7]
                                     [--single 1000] [--block 50] [--no-write]

Three arms, alternating block by block within each round (plain, unique, absorbed, absorbed,
unique, plain, …: whatever the shared machine does meanwhile hits every arm alike), each
round on an emptied queue:

- ``plain``: ``queue.enqueue("bench", {"i": i})``;
- ``unique``: the same with ``unique={"key": <a fresh key>}``: every call takes a key
  (the engine's upsert or script finds no holder and stores the job);
- ``absorbed``: ``unique={"key": "held"}``: every call finds the key held and is answered
  by its holder (``deduplicated=True``), the holder's ``unique_calls`` counted.

Each arm's rate is the median of the rounds; ``unique / plain``, the median of the rounds'
own ratios (target ≥ 80 %). PostgreSQL, Redis and moto_server (SQS, its ledger on that
PostgreSQL) are throwaway servers (``tests.servers``, fsync on for PostgreSQL); SQLite a fresh
file configured as ``testproject`` does.

Writes ``bench/results/unique.json`` and the part of ``docs/unique.md`` between the
``bench:unique`` markers.
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
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DOC = ROOT / "docs" / "unique.md"
RESULTS = ROOT / "bench" / "results" / "unique.json"
BEGIN, END = "<!-- bench:unique:begin -->", "<!-- bench:unique:end -->"
TARGET = 0.80  # unique enqueue's rate as a share of plain enqueue's
ARMS = ("plain", "unique", "absorbed")
ENGINES = ("sqlite", "postgres", "redis", "sqs")
ORDER = ("plain", "unique", "absorbed", "absorbed", "unique", "plain")


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ the child
def child(cfg: dict[str, Any]) -> dict[str, Any]:
    import django

    django.setup()
    from django.core.management import call_command

    from django_blamequeue import queue
    from django_blamequeue.backends import get_backend

    call_command("migrate", verbosity=0)
    block, fresh = cfg["block"], iter(range(10**9))
    backend = get_backend("default")

    def plain() -> None:
        for i in range(block):
            queue.enqueue("bench", {"i": i})

    def unique() -> None:
        for i in range(block):
            queue.enqueue("bench", {"i": i}, unique={"key": f"u{next(fresh)}"})

    def absorbed() -> None:
        for i in range(block):
            queue.enqueue("bench", {"i": i}, unique={"key": "held"})

    calls: dict[str, Callable[[], None]] = {"plain": plain, "unique": unique, "absorbed": absorbed}

    def empty() -> None:
        backend.purge("bench")
        for s in backend.stats():
            if s.queue == "bench":  # purge leaves the finished: none here, nothing ran
                assert s.counts.get("pending", 0) == 0, s.counts

    rates: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for arm in ARMS:
        calls[arm]()  # warm-up: connections, statement caches, scripts loaded
    empty()
    blocks = cfg["single"] // block
    for _ in range(cfg["rounds"]):
        took = dict.fromkeys(ARMS, 0.0)
        for b in range(len(ARMS) * blocks):
            arm = ORDER[b % len(ORDER)]
            start = time.perf_counter()
            calls[arm]()
            took[arm] += time.perf_counter() - start
        for arm in ARMS:
            rates[arm].append(blocks * block / took[arm])
        empty()
    return {"rates": rates}


# ----------------------------------------------------------------------------- the driver
def run_child(
    cfg: dict[str, Any], env_extra: dict[str, str], script: str = __file__
) -> dict[str, Any]:
    """``script --child CONFIG`` in a fresh interpreter (its own settings); its RESULT."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        **env_extra,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, script, "--child", json.dumps(cfg)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"the {env_extra} run failed (exit {proc.returncode})")
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


def rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    table = []
    for engine, result in report["results"].items():
        r = result["rates"]
        med = {arm: statistics.median(r[arm]) for arm in ARMS}
        share = statistics.median(u / p for u, p in zip(r["unique"], r["plain"], strict=True))
        table.append(
            (
                engine,
                f"{med['plain']:,.0f}",
                f"{med['unique']:,.0f}",
                f"{med['absorbed']:,.0f}",
                f"{share * 100:.0f} %",
                f"≥ {TARGET * 100:.0f} %: {'met' if share >= TARGET else 'missed'}",
            )
        )
    return table


HEADER = ("engine", "plain (jobs/s)", "unique", "absorbed", "unique / plain", "target")


def markdown(report: dict[str, Any]) -> str:
    cfg = report["cfg"]
    return "\n".join(
        [
            BEGIN,
            f"<!-- written by bench/unique.py on {report['finished']}; "
            "edit outside the markers -->",
            "",
            f"Run of {report['finished']} (`bench/unique.py {report['argv']}`, "
            f"{report['elapsed_s']:.0f} s) on {report['machine']}; load average "
            f"{report['load'][0]:.1f} at the start, {report['load'][1]:.1f} at the end (the "
            "machine is shared). Single enqueues from one thread; per arm and round "
            f"{cfg['single']:,} calls in blocks of {cfg['block']}, the arms interleaved block "
            f"by block; {cfg['rounds']} rounds. Rates: the median of the rounds; the share: the "
            "median of the rounds' own `unique / plain`.",
            "",
            "| " + " | ".join(HEADER) + " |",
            "|" + "---|" * len(HEADER),
            *("| " + " | ".join(r) + " |" for r in rows(report)),
            "",
            END,
        ]
    )


def write_doc(report: dict[str, Any]) -> None:
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    DOC.write_text(head + markdown(report) + rest.split(END, 1)[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--engine", choices=[*ENGINES, "all"], default="all")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--single", type=int, default=1000, help="calls per arm and round")
    parser.add_argument("--block", type=int, default=50, help="calls per block")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument("--child", metavar="CONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    cfg = {k: getattr(args, k) for k in ("rounds", "single", "block")}
    engines = list(ENGINES) if args.engine == "all" else [args.engine]
    started = time.perf_counter()
    report: dict[str, Any] = {
        "cfg": cfg,
        "argv": " ".join(sys.argv[1:]) or "(defaults)",
        "machine": f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
        "results": {},
    }
    load_start = os.getloadavg()[0]
    from tests.servers import MotoServer, PostgresServer, RedisServer

    with tempfile.TemporaryDirectory(prefix="bq-unique-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)  # the PostgreSQL user must reach its data directory
        sqlite_url = f"sqlite:///{base / 'u.sqlite3'}"
        for engine in engines:
            log(f"{engine}: {len(ARMS)} arms × {cfg['rounds']} rounds")
            if engine == "sqlite":
                env = {"BENCH_DATABASE_URL": sqlite_url}
                report["results"][engine] = run_child(cfg, env)
            elif engine in ("postgres", "sqs"):
                pg = PostgresServer(base / f"pg-{engine}")
                pg.start()
                try:
                    env = {"BENCH_DATABASE_URL": pg.url}
                    if engine == "sqs":
                        moto = MotoServer(base / "moto")
                        moto.start()
                        env |= {
                            "BENCH_SQS_URL": moto.url,
                            "DJANGO_SETTINGS_MODULE": "bench.sqs_settings",
                        }
                    try:
                        report["results"][engine] = run_child(cfg, env)
                    finally:
                        if engine == "sqs":
                            moto.stop()
                finally:
                    pg.stop()
            else:
                redis = RedisServer(base / "redis")
                redis.start()
                try:
                    env = {"BENCH_DATABASE_URL": sqlite_url, "BENCH_REDIS_URL": redis.url}
                    report["results"][engine] = run_child(cfg, env)
                finally:
                    redis.stop()
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
