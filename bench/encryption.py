#!/usr/bin/env python
"""What encryption at rest costs: enqueue and drain with and without it, in the same run.

    .venv/bin/python bench/encryption.py [--engine sqlite|postgres|redis|sqs|all]
                                         [--rounds 5] [--jobs 500] [--no-write]

Two arms per engine, the same job (a ~300-byte JSON payload, a small dict as its result):
``plain`` on queue "plain", ``encrypted`` on queue "sealed", which ``ENCRYPT`` names (one
Fernet key). Each round enqueues ``--jobs`` jobs per arm in alternating blocks of 50, then
drains each queue with one worker in burst mode (``queue.consume(..., burst=True)``: claim,
decrypt, run, encrypt the result, ack), the order of the two drains swapped every round.
Rates are the median of the rounds; the overhead, the median of the rounds' own
``1 - encrypted / plain``. Servers as ``bench/unique.py`` starts them.

Writes ``bench/results/encryption.json`` and the part of ``docs/encryption.md`` between the
``bench:encryption`` markers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.unique import log, run_child  # noqa: E402  (the child runs this file)

DOC = ROOT / "docs" / "encryption.md"
RESULTS = ROOT / "bench" / "results" / "encryption.json"
BEGIN, END = "<!-- bench:encryption:begin -->", "<!-- bench:encryption:end -->"
ENGINES = ("sqlite", "postgres", "redis", "sqs")
ARMS = ("plain", "encrypted")
QUEUES = {"plain": "plain", "encrypted": "sealed"}
BLOCK = 50


def payload(i: int) -> dict[str, Any]:
    return {
        "order": i,
        "email": f"customer{i}@example.com",
        "card": "4111-1111-1111-1111",
        "lines": [{"sku": f"SKU-{i}-{n}", "qty": n + 1, "price": "19.99"} for n in range(3)],
    }


# ------------------------------------------------------------------------------ the child
def child(cfg: dict[str, Any]) -> dict[str, Any]:
    import django

    django.setup()
    from cryptography.fernet import Fernet
    from django.conf import settings
    from django.core.management import call_command
    from django.test import override_settings

    from django_blamequeue import queue

    call_command("migrate", verbosity=0)
    keys = {"ENCRYPTION_KEYS": [Fernet.generate_key().decode()], "ENCRYPT": ["sealed"]}
    override_settings(BLAMEQUEUE={**settings.BLAMEQUEUE, **keys}).enable()

    def handler(job: Any, ctx: Any) -> dict[str, Any]:
        return {"charged": job.payload["order"], "ok": True}

    def enqueue(arm: str, n: int) -> None:
        for i in range(n):
            queue.enqueue(QUEUES[arm], payload(i))

    def drain(arm: str) -> None:
        consumer = queue.consume(QUEUES[arm], handler, poll_interval=0.01, burst=True)
        assert consumer.join(600), "the drain did not finish"

    for arm in ARMS:  # warm-up: connections, statement caches, scripts, the cipher
        enqueue(arm, BLOCK)
        drain(arm)
    enq: dict[str, list[float]] = {arm: [] for arm in ARMS}
    run: dict[str, list[float]] = {arm: [] for arm in ARMS}
    blocks = cfg["jobs"] // BLOCK
    for r in range(cfg["rounds"]):
        took = dict.fromkeys(ARMS, 0.0)
        for b in range(2 * blocks):
            arm = ARMS[(b + r) % 2]
            start = time.perf_counter()
            enqueue(arm, BLOCK)
            took[arm] += time.perf_counter() - start
        for arm in ARMS:
            enq[arm].append(blocks * BLOCK / took[arm])
        for arm in ARMS if r % 2 == 0 else tuple(reversed(ARMS)):
            start = time.perf_counter()
            drain(arm)
            run[arm].append(blocks * BLOCK / (time.perf_counter() - start))
    return {"enqueue": enq, "drain": run, "cipher_us": cipher_cost()}


def cipher_cost(n: int = 2000) -> float:
    """Microseconds of Fernet per job, alone: seal the payload, open it, seal the result,
    open it (what the seam adds to an enqueue and a run, without any round trip)."""
    from django_blamequeue import encryption
    from django_blamequeue.serializers import decode, encode

    body, result = encode(payload(1)), encode({"charged": 1, "ok": True})
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            sealed = encryption.seal(body)
            decode(sealed.content_type, sealed.content_encoding, sealed.body)
            done = encryption.seal(result)
            decode(done.content_type, done.content_encoding, done.body)
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


# ----------------------------------------------------------------------------- the driver
def overhead(result: dict[str, list[float]]) -> float:
    pairs = zip(result["encrypted"], result["plain"], strict=True)
    return statistics.median(1 - e / p for e, p in pairs)


def rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    table = []
    for engine, result in report["results"].items():
        med = {
            (kind, arm): statistics.median(result[kind][arm])
            for kind in ("enqueue", "drain")
            for arm in ARMS
        }
        table.append(
            (
                engine,
                f"{med['enqueue', 'plain']:,.0f}",
                f"{med['enqueue', 'encrypted']:,.0f}",
                f"{overhead(result['enqueue']) * 100:.0f} %",
                f"{med['drain', 'plain']:,.0f}",
                f"{med['drain', 'encrypted']:,.0f}",
                f"{overhead(result['drain']) * 100:.0f} %",
                f"{result['cipher_us']:.0f} µs",
            )
        )
    return table


HEADER = (
    "engine",
    "enqueue plain (jobs/s)",
    "enqueue encrypted",
    "enqueue overhead",
    "drain plain (jobs/s)",
    "drain encrypted",
    "drain overhead",
    "Fernet per job",
)


def markdown(report: dict[str, Any]) -> str:
    cfg = report["cfg"]
    return "\n".join(
        [
            BEGIN,
            f"<!-- written by bench/encryption.py on {report['finished']}; "
            "edit outside the markers -->",
            "",
            f"Run of {report['finished']} (`bench/encryption.py {report['argv']}`, "
            f"{report['elapsed_s']:.0f} s) on {report['machine']}; load average "
            f"{report['load'][0]:.1f} at the start, {report['load'][1]:.1f} at the end (the "
            f"machine is shared). {cfg['jobs']:,} jobs per arm and round, {cfg['rounds']} "
            "rounds; single enqueues from one thread, the arms in alternating blocks of "
            f"{BLOCK}; each drain one worker in burst mode. Rates: the median of the rounds; "
            "overhead: the median of the rounds' own `1 - encrypted / plain` (negative: the "
            "encrypted arm was faster, i.e. noise). Fernet per job: sealing and opening the "
            "payload and the result alone, the best of 5 × 2,000.",
            "",
            "| " + " | ".join(HEADER) + " |",
            "|" + "---|" * len(HEADER),
            *("| " + " | ".join(r) + " |" for r in rows(report)),
            "",
            END,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--engine", choices=[*ENGINES, "all"], default="all")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=500, help="jobs per arm and round")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument("--child", metavar="CONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    cfg = {"rounds": args.rounds, "jobs": max(BLOCK, args.jobs // BLOCK * BLOCK)}
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

    with tempfile.TemporaryDirectory(prefix="bq-crypto-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)  # the PostgreSQL user must reach its data directory
        sqlite_url = f"sqlite:///{base / 'c.sqlite3'}"
        for engine in engines:
            log(f"{engine}: {len(ARMS)} arms × {cfg['rounds']} rounds of {cfg['jobs']} jobs")
            if engine == "sqlite":
                report["results"][engine] = run_child(
                    cfg, {"BENCH_DATABASE_URL": sqlite_url}, __file__
                )
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
                        report["results"][engine] = run_child(cfg, env, __file__)
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
                    report["results"][engine] = run_child(cfg, env, __file__)
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
        text = DOC.read_text()
        head, rest = text.split(BEGIN, 1)
        DOC.write_text(head + markdown(report) + rest.split(END, 1)[1])
        print(f"\nwrote {RESULTS.relative_to(ROOT)} and {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
