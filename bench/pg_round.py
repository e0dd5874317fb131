#!/usr/bin/env python
"""A PostgreSQL worker round's own cost, before and after a change, side by side (not a test).

    .venv/bin/python bench/pg_round.py [--rounds 2000] [--batch 5] [--repeat 3]
                                       [--before DIR] [--no-write]

A worker with the default 10 slots under a steady load claims a few jobs a round (3–7 in
``bench/latency.py`` and ``bench/overhead.py``), so what a round costs (its round trips, the
driver's and Django's Python per statement, the library's own) weighs on every job. This
measures that cost alone, with no handler, no slot threads, no other process: one process
claims ``--batch`` no-op jobs, then ``--rounds`` times acks them done with the next claim
(``apply_and_claim``, as ``runworker`` calls it), each round one transaction.

One throwaway PostgreSQL 15 (``tests.servers``, fsync on, loopback), a database of its own
per measurement. Per repeat and per checkout (``--before DIR``: a checkout of the code before,
e.g. ``git archive main | tar -x -C DIR``; then this one; the order alternates every repeat) a
child process with that checkout's package on ``sys.path`` runs the loop and reports its own
CPU and wall time per round, and the server's CPU per round. Prints a table and the medians;
writes ``bench/results/pg-round.json`` unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: In a child of ``--before``: a directory holding only that checkout's package (a symlink),
#: put first so the package comes from there and ``bench`` from this checkout.
_PACKAGE_FROM = os.environ.get("BENCH_PACKAGE_FROM")
for _path in (str(ROOT), _PACKAGE_FROM):
    if _path and _path not in sys.path:
        sys.path.insert(0, _path)

from bench import drain  # noqa: E402
from bench.throughput import postgres_cpu  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "pg-round.json"
SETTINGS = "bench.settings"

log = drain.logger("pg-round")


def child(url: str, rounds: int, batch: int, pg_pid: int) -> dict[str, Any]:
    """The loop, in this process (``--child``): the package is whichever ``sys.path`` has."""
    drain.setup_django(url, SETTINGS)
    from bench.jobs import NOOP
    from django_blamequeue.backends import get_backend
    from django_blamequeue.core.records import Ack, Transition
    from django_blamequeue.core.states import State

    warm = 20  # rounds before the measured ones: every statement prepared, every plan made
    drain.enqueue_bulk(NOOP, (warm + 1 + rounds) * batch)  # and the first claim's
    backend = get_backend(None)
    done = Transition(state=State.DONE)
    claimed = backend.claim([drain.QUEUE], batch, 30.0)

    def round_() -> int:
        """One round: the acks of the last claim, the next claim; answers the acks applied."""
        nonlocal claimed
        acks = [Ack(job_id=c.job_id, token=c.token, transition=done) for c in claimed]
        results, claimed = backend.apply_and_claim(acks, [drain.QUEUE], batch, 30.0)
        return sum(r.ok for r in results)

    for _ in range(warm):
        round_()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = usage.ru_utime + usage.ru_stime
    pg0, t0 = postgres_cpu(pg_pid), time.perf_counter()
    acked = sum(round_() for _ in range(rounds))
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    import django_blamequeue

    return {
        "package": str(Path(django_blamequeue.__file__).resolve().parent.parent),
        "rounds": rounds,
        "acked": acked,
        "client_cpu_us": 1e6 * (usage.ru_utime + usage.ru_stime - cpu0) / rounds,
        "server_cpu_us": 1e6 * (postgres_cpu(pg_pid) - pg0) / rounds,
        "wall_us": 1e6 * wall / rounds,
    }


def measure(
    code: Path, url: str, args: argparse.Namespace, pg_pid: int, base: Path
) -> dict[str, Any]:
    """One run of the loop in a child with ``code``'s package."""
    env = dict(os.environ)
    if code != ROOT:
        shim = base / f"package-{abs(hash(code))}"
        if not shim.exists():
            shim.mkdir()
            (shim / "django_blamequeue").symlink_to(code / "django_blamequeue")
        env["BENCH_PACKAGE_FROM"] = str(shim)
    command = [sys.executable, __file__, "--child", url, str(args.rounds), str(args.batch)]
    out = subprocess.run(
        [*command, str(pg_pid)], env=env, cwd=ROOT, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"the loop failed ({code}):\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2000, help="rounds per measurement")
    parser.add_argument("--batch", type=int, default=5, help="jobs claimed and acked a round")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", type=Path, help="a checkout of the code before the change")
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.name}")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        url, rounds, batch, pg_pid = args.child
        print(json.dumps(child(url, int(rounds), int(batch), int(pg_pid))))
        return
    sides = [("before", args.before.resolve())] if args.before else []
    sides.append(("after", ROOT))
    report: dict[str, Any] = {**drain.report_head("pg_round.py", argv, args), "runs": []}
    with tempfile.TemporaryDirectory(prefix="bq-bench-round-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)  # the PostgreSQL user must traverse it when this runs as root
        log("starting a throwaway PostgreSQL (fsync on)")
        with drain.Cluster(base) as pg:
            report["server"] = pg.facts()
            assert pg.pid is not None
            for r in range(args.repeat):
                for side, code in sides[::-1] if r % 2 else sides:
                    url = pg.create_database(f"round_{side}_{r}")
                    got = measure(code, url, args, pg.pid, base)
                    got.update(side=side, repeat=r + 1, load=os.getloadavg()[0])
                    report["runs"].append(got)
                    log(
                        f"{side} {r + 1} ({got['package']}): "
                        f"{got['client_cpu_us']:,.0f} µs of client CPU, "
                        f"{got['server_cpu_us']:,.0f} of the server's, {got['wall_us']:,.0f} wall "
                        f"per round of {args.batch} ({got['acked']:,} acked)"
                    )
    rows, medians = [], {}
    for side, _ in sides:
        runs = [x for x in report["runs"] if x["side"] == side]
        medians[side] = {
            k: statistics.median(x[k] for x in runs)
            for k in ("client_cpu_us", "server_cpu_us", "wall_us")
        }
        for x in runs:
            rows.append([f"{side} {x['repeat']}", *(f"{x[k]:,.0f}" for k in medians[side])])
        rows.append([f"{side}: median", *(f"{v:,.0f}" for v in medians[side].values())])
    report["medians"] = medians
    header = ["side", "client CPU µs/round", "server CPU µs/round", "wall µs/round"]
    print(f"\nrounds of {args.batch} acks + a claim of {args.batch}, {args.rounds:,} per run")
    print(drain.text_table(header, rows))
    if not args.no_write:
        RESULTS.write_text(json.dumps(report, indent=2) + "\n")
        log(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
