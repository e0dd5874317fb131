#!/usr/bin/env python
"""How fast ``blamequeue rotate-keys`` re-encrypts stored jobs, per engine.

    .venv/bin/python bench/rotate_keys.py [--engine sqlite|postgres|redis|sqs|all]
                                          [--jobs 10000] [--sqs-jobs 2000] [--batch 500]
                                          [--no-write]

Per engine: ``--jobs`` encrypted jobs (``--sqs-jobs`` on SQS: moto, the emulator, slows down
with every message its queue holds and timed out sending the 9,000th; the rotation itself
reads only the ledger) (the ~300-byte payload of ``bench/encryption.py``)
stored with key A (``queue.enqueue_many`` in blocks of 500, waiting: nothing drains them),
then ``ENCRYPTION_KEYS`` = [B, A] and the command itself, timed from its start to its last
line: jobs re-encrypted per second. Servers as ``bench/encryption.py`` starts them.

Writes ``bench/results/rotate_keys.json`` and the part of ``docs/encryption.md`` between the
``bench:rotate-keys`` markers.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.encryption import payload  # noqa: E402
from bench.unique import log, run_child  # noqa: E402  (the child runs this file)

DOC = ROOT / "docs" / "encryption.md"
RESULTS = ROOT / "bench" / "results" / "rotate_keys.json"
BEGIN, END = "<!-- bench:rotate-keys:begin -->", "<!-- bench:rotate-keys:end -->"
ENGINES = ("sqlite", "postgres", "redis", "sqs")
BLOCK = 500


def child(cfg: dict[str, Any]) -> dict[str, Any]:
    import django

    django.setup()
    from cryptography.fernet import Fernet
    from django.conf import settings
    from django.core.management import call_command
    from django.test import override_settings

    from django_blamequeue import queue

    call_command("migrate", verbosity=0)
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    base = {**settings.BLAMEQUEUE, "ENCRYPT": ["sealed"]}
    with override_settings(BLAMEQUEUE={**base, "ENCRYPTION_KEYS": [old]}):
        for start in range(0, cfg["jobs"], BLOCK):
            count = min(BLOCK, cfg["jobs"] - start)
            queue.enqueue_many("sealed", [payload(start + i) for i in range(count)])
    out = io.StringIO()
    with override_settings(BLAMEQUEUE={**base, "ENCRYPTION_KEYS": [new, old]}):
        began = time.perf_counter()
        call_command("blamequeue", "rotate-keys", "--batch", str(cfg["batch"]), stdout=out)
        took = time.perf_counter() - began
    lines = out.getvalue().splitlines()
    done = next(line for line in lines if "re-encrypted with the first key" in line)
    rewritten = int(done.split(": ", 1)[1].split(" ", 1)[0].replace(",", ""))
    return {"seconds": took, "rewritten": rewritten, "last_line": done}


def markdown(report: dict[str, Any]) -> str:
    cfg = report["cfg"]
    lines = [
        f"Run of {report['finished']} (`bench/rotate_keys.py {report['argv']}`) on "
        f"{report['machine']}; load average {report['load'][0]:.1f} at the start, "
        f"{report['load'][1]:.1f} at the end (the machine is shared). Waiting encrypted jobs "
        f"stored with the old key, `rotate-keys --batch {cfg['batch']}` timed whole.",
        "",
        "| engine | jobs re-encrypted | seconds | jobs/s |",
        "|---|---|---|---|",
    ]
    for engine, r in report["results"].items():
        rate = r["rewritten"] / r["seconds"] if r["seconds"] else 0.0
        lines.append(f"| {engine} | {r['rewritten']:,} | {r['seconds']:.1f} | {rate:,.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--engine", choices=[*ENGINES, "all"], default="all")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--sqs-jobs", type=int, default=2_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument("--child", metavar="CONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    cfg = {"jobs": args.jobs, "sqs_jobs": args.sqs_jobs, "batch": args.batch}
    engines = list(ENGINES) if args.engine == "all" else [args.engine]
    report: dict[str, Any] = {
        "cfg": cfg,
        "argv": " ".join(sys.argv[1:]) or "(defaults)",
        "machine": f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
        "results": {},
    }
    load_start = os.getloadavg()[0]
    from tests.servers import MotoServer, PostgresServer, RedisServer

    with tempfile.TemporaryDirectory(prefix="bq-rotate-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)  # the PostgreSQL user must reach its data directory
        sqlite_url = f"sqlite:///{base / 'r.sqlite3'}"
        for engine in engines:
            jobs = cfg["sqs_jobs"] if engine == "sqs" else cfg["jobs"]
            log(f"{engine}: {jobs:,} jobs")
            if engine == "sqlite":
                env = {"BENCH_DATABASE_URL": sqlite_url}
                report["results"][engine] = run_child({**cfg, "jobs": jobs}, env, __file__)
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
                        report["results"][engine] = run_child({**cfg, "jobs": jobs}, env, __file__)
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
                    report["results"][engine] = run_child({**cfg, "jobs": jobs}, env, __file__)
                finally:
                    redis.stop()
            log(report["results"][engine]["last_line"])
    report["load"] = (load_start, os.getloadavg()[0])
    report["finished"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = markdown(report)
    print(text)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(report, indent=2) + "\n")
        doc = DOC.read_text()
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        stamp = (
            f"<!-- written by bench/rotate_keys.py on {report['finished']}; "
            "edit outside the markers -->"
        )
        DOC.write_text(f"{head}{BEGIN}\n{stamp}\n\n{text}\n\n{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
