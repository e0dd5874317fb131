#!/usr/bin/env python
"""Pressure: the queue at a fixed offered load while PostgreSQL is made to suffer.

    .venv/bin/python bench/pressure.py [--phase-seconds 600] [--workers 2] [--concurrency 10]
                                       [--rate auto] [--scenarios all] [--no-write]
                                       [--keep-logs DIR]

A throwaway PostgreSQL 15 (``tests.servers``, fsync on, loopback, ``max_connections`` raised
to 500 in this server only) and ``--workers`` × ``manage.py runworker bench`` (the sweeper on,
so expired leases are rescued). First the peak: a backlog drained as fast as the workers go.
Then a paced producer offers ``--rate`` jobs/s (default: half the peak) in batches every
100 ms, and each scenario, once the backlog the one before left is worked off (at most a
second of load pending), runs three phases of ``--phase-seconds``: baseline, the pressure,
recovery:

- ``idle_in_tx``: a session opens a transaction, takes an xid and sits idle in it (the xmin
  horizon pinned: no dead tuple of the job table can be vacuumed);
- ``rr_readers``: 4 sessions at REPEATABLE READ scan the job table over and over in one
  transaction each (an analytics reader);
- ``overload``: the producer offers 1.5 × the rate;
- ``idle_conns``: 300 more sessions connect and sit idle;
- ``terminate``: every second ``pg_terminate_backend`` of every worker session.

Per phase: jobs completed per second (and as a share of the offered rate), pickup latency
(``started_at − created_at``) p50/p95/p99 of the jobs enqueued in the phase, the queue depth
(jobs waiting or running, sampled each second: mean and max; see ``Depth``), the job table's
dead tuples and total size at the phase's end. Recovery: seconds after the pressure ended until
the depth was back under the baseline's maximum. At the end every job enqueued must be done
exactly once (nothing lost, nothing left). Goals (reported, not asserted): every phase ≥ 90 %
of the offered rate, p99 ≤ 3 × the baseline's, recovery ≤ 30 s. Writes
``bench/results/pressure.json`` unless ``--no-write``; ``--keep-logs DIR`` keeps the workers'
logs (their back-offs and reconnections) in DIR.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import drain  # noqa: E402
from bench.throughput import machine  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "pressure.json"
SETTINGS = "bench.settings"
WORKER_APP = "bq-pressure-worker"  # application_name of the workers' sessions
SCENARIOS = ("idle_in_tx", "rr_readers", "overload", "idle_conns", "terminate")

log = drain.logger("pressure")


# ------------------------------------------------------------------------ the offered load
class Producer:
    """Enqueues ``rate`` jobs/s in batches every ``tick`` seconds, on its own thread and
    connection; ``scale`` changes the rate between phases (1.5 for the overload)."""

    def __init__(self, rate: float, tick: float = 0.1) -> None:
        self.rate = rate
        self.scale = 1.0
        self.tick = tick
        self.enqueued = 0
        self.behind = 0.0  # jobs owed when a batch took longer than its tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        from django.db import connection

        from django_blamequeue import queue

        owed, last = 0.0, time.perf_counter()
        try:
            while not self._stop.is_set():
                now = time.perf_counter()
                owed += (now - last) * self.rate * self.scale
                last = now
                count = int(owed)
                if count:
                    queue.enqueue_many(drain.QUEUE, [{"i": 0}] * count, name="bench.noop")
                    self.enqueued += count
                    owed -= count
                self.behind = owed
                self._stop.wait(max(0.0, self.tick - (time.perf_counter() - now)))
        except BaseException as e:  # reported by stop()
            self.error = e
        finally:
            connection.close()


# ------------------------------------------------------------------------ the pressures
class Pressure:
    """Each pressure is a context manager: entered when its phase starts, left when it ends."""

    def __init__(self, url: str, producer: Producer) -> None:
        self.url = url
        self.producer = producer

    def connect(self, **kwargs: Any) -> Any:
        import psycopg

        return psycopg.connect(self.url, application_name="bq-pressure", **kwargs)

    @contextmanager
    def idle_in_tx(self) -> Iterator[None]:
        conn = self.connect()
        conn.execute("SELECT txid_current()")  # an xid: the horizon is pinned from here
        try:
            yield
        finally:
            conn.rollback()
            conn.close()

    @contextmanager
    def rr_readers(self) -> Iterator[None]:
        import psycopg

        stop = threading.Event()
        scans = [0]

        def read() -> None:
            with self.connect() as conn:
                conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
                with conn.transaction():
                    while not stop.is_set():
                        conn.execute(
                            "SELECT state, count(*), sum(length(payload)), max(finished_at) "
                            "FROM blamequeue_job GROUP BY state"
                        ).fetchall()
                        scans[0] += 1

        threads = [threading.Thread(target=read, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            yield
        finally:
            stop.set()
            for t in threads:
                t.join()
            log(f"  the readers scanned the job table {scans[0]} times")

    @contextmanager
    def overload(self) -> Iterator[None]:
        self.producer.scale = 1.5
        try:
            yield
        finally:
            self.producer.scale = 1.0

    @contextmanager
    def idle_conns(self) -> Iterator[None]:
        conns = [self.connect(autocommit=True) for _ in range(300)]
        try:
            yield
        finally:
            for c in conns:
                c.close()

    @contextmanager
    def terminate(self) -> Iterator[None]:
        stop = threading.Event()
        killed = [0]

        def kill() -> None:
            with self.connect(autocommit=True) as conn:
                while not stop.wait(1.0):
                    rows = conn.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = %s",
                        [WORKER_APP],
                    ).fetchall()
                    killed[0] += len(rows)

        thread = threading.Thread(target=kill, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            log(f"  {killed[0]} worker sessions terminated")


# ------------------------------------------------------------------------ measuring
class Depth:
    """Jobs waiting or running, sampled each second on a thread of its own (its own
    connection): the jobs enqueued (``enqueued()``) less the jobs done, counted as they finish
    through the index of finished rows (``bq_job_finished``): a running total of the rows
    finished more than ``LAG`` seconds ago, plus the last ``LAG`` seconds read afresh (an ack
    commits within that of its ``finished_at`` stamp).

    Not ``count(*) … WHERE state = 'pending'``: while a long transaction pins the xmin horizon
    that count reads every dead entry of the claim index, ≈ 1.7 s a sample after ten minutes
    at 2,250 jobs/s, so the probe took most of a core from the machine it measured. This one
    reads ≈ ``LAG`` seconds of finished rows a sample whatever the pin."""

    LAG = 10.0

    def __init__(self, url: str, enqueued: Callable[[], int]) -> None:
        self.url = url
        self.enqueued = enqueued
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="depth", daemon=True)

    def __enter__(self) -> Depth:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psycopg

        done = (
            "SELECT count(*) FROM blamequeue_job WHERE state = 'done' AND finished_at IS NOT NULL"
        )
        with psycopg.connect(self.url, autocommit=True, application_name="bq-pressure") as c:
            cutoff = None
            settled = 0  # done before ``cutoff``
            while not self._stop.is_set():
                try:
                    enqueued = self.enqueued()
                    row = c.execute(f"SELECT statement_timestamp() - {self.LAG} * interval '1 s'")
                    (now_cutoff,) = row.fetchone() or (None,)
                    if cutoff is None:
                        (n,) = c.execute(done + " AND finished_at < %s", [now_cutoff]).fetchone()
                    else:
                        (n,) = c.execute(
                            done + " AND finished_at >= %s AND finished_at < %s",
                            [cutoff, now_cutoff],
                        ).fetchone()
                    settled, cutoff = settled + int(n), now_cutoff
                    (recent,) = c.execute(done + " AND finished_at >= %s", [cutoff]).fetchone()
                    depth = max(0, enqueued - settled - int(recent))
                    self.samples.append((time.time(), depth))
                except psycopg.Error:
                    pass  # one missed sample (the server is being made to suffer)
                self._stop.wait(1.0)

    def between(self, t0: float, t1: float) -> list[int]:
        return [d for t, d in self.samples if t0 <= t < t1]


def phase_figures(t0: float, t1: float, depth: Depth, offered: float) -> dict[str, Any]:
    """What one phase looked like, read from the jobs' own timestamps."""
    start, end = datetime.fromtimestamp(t0).astimezone(), datetime.fromtimestamp(t1).astimezone()
    ((completed,),) = drain.sql(
        "SELECT count(*) FROM blamequeue_job WHERE finished_at >= %s AND finished_at < %s",
        [start, end],
    )
    pickups = drain.sql(
        "SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP "
        "(ORDER BY extract(epoch FROM started_at - created_at)) "
        "FROM blamequeue_job WHERE created_at >= %s AND created_at < %s "
        "AND started_at IS NOT NULL",
        [start, end],
    )[0][0] or [None, None, None]
    ((dead, size),) = drain.sql(
        "SELECT n_dead_tup, pg_total_relation_size('blamequeue_job') FROM pg_stat_user_tables "
        "WHERE relname = 'blamequeue_job'"
    )
    depths = depth.between(t0, t1) or [0]
    rate = completed / (t1 - t0)

    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 1)

    return {
        "seconds": round(t1 - t0, 1),
        "offered_per_s": round(offered, 1),
        "completed_per_s": round(rate, 1),
        "share_of_offered": round(rate / offered, 3),
        "pickup_p50_ms": ms(pickups[0]),
        "pickup_p95_ms": ms(pickups[1]),
        "pickup_p99_ms": ms(pickups[2]),
        "depth_mean": round(sum(depths) / len(depths), 1),
        "depth_max": max(depths),
        "dead_tuples": dead,
        "table_mb": round(size / 1024 / 1024, 1),
    }


def recovery_seconds(depth: Depth, ended: float, until: float, ceiling: int) -> float | None:
    """Seconds after ``ended`` until the depth was back under ``ceiling`` (None: never in
    the recovery phase)."""
    for t, d in depth.samples:
        if ended <= t < until and d <= ceiling:
            return round(t - ended, 1)
    return None


def measure_peak(seconds: float, backlog: int) -> float:
    """Jobs/s the running workers drain from a standing backlog of ``backlog`` jobs."""
    drain.enqueue_bulk("bench.noop", backlog)
    t0 = time.time()
    deadline = time.monotonic() + seconds * 10
    while drain.done_count() < backlog and time.monotonic() < deadline:
        time.sleep(0.5)
    ((first, last, n),) = drain.sql(
        "SELECT min(started_at), max(finished_at), count(*) FROM blamequeue_job "
        "WHERE state = 'done'"
    )
    if n < backlog:
        raise RuntimeError(f"the peak drain finished {n} of {backlog} jobs")
    log(f"peak drain of {backlog} jobs in {time.time() - t0:.1f} s")
    return float(n / (last - first).total_seconds())


def settle_backlog(depth: Depth, rate: float, timeout: float = 600.0) -> float:
    """Wait until the backlog the previous scenario left is worked off (at most a second of
    offered load pending), so each baseline starts from a queue at its steady state."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if depth.samples and depth.samples[-1][0] > t0 and depth.samples[-1][1] <= rate:
            break
        time.sleep(0.5)
    return round(time.time() - t0, 1)


def run_scenario(
    name: str,
    pressure: Callable[[], Any],
    phase: float,
    producer: Producer,
    depth: Depth,
    rate: float,
) -> dict[str, Any]:
    out: dict[str, Any] = {"settled_after_s": settle_backlog(depth, rate)}
    t0 = time.time()
    time.sleep(phase)
    t1 = time.time()
    out["baseline"] = phase_figures(t0, t1, depth, rate)
    log(f"{name}: baseline {out['baseline']}")
    with pressure():
        time.sleep(phase)
    t2 = time.time()
    offered = rate * (1.5 if name == "overload" else 1.0)
    out["pressure"] = phase_figures(t1, t2, depth, offered)
    log(f"{name}: pressure {out['pressure']}")
    time.sleep(phase)
    t3 = time.time()
    out["recovery"] = phase_figures(t2, t3, depth, rate)
    out["recovered_after_s"] = recovery_seconds(depth, t2, t3, out["baseline"]["depth_max"])
    log(
        f"{name}: recovery {out['recovery']}; back to baseline depth after "
        f"{out['recovered_after_s']} s"
    )
    base_p99 = out["baseline"]["pickup_p99_ms"] or 0.0
    worst_p99 = max(out[p]["pickup_p99_ms"] or 0.0 for p in ("pressure", "recovery"))
    out["goals"] = {
        "rate_90pct": all(out[p]["share_of_offered"] >= 0.9 for p in ("pressure", "recovery")),
        "p99_within_3x": base_p99 > 0 and worst_p99 <= 3 * base_p99,
        "recovery_30s": out["recovered_after_s"] is not None and out["recovered_after_s"] <= 30,
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--phase-seconds", type=float, default=600.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--rate", default="auto", help="offered jobs/s (auto: half the peak)")
    parser.add_argument("--peak-jobs", type=int, default=5000, help="backlog of the peak drain")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.name}")
    parser.add_argument("--keep-logs", type=Path, help="copy the workers' logs into this directory")
    args = parser.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}; choose from {SCENARIOS}")

    report: dict[str, Any] = {
        "command": "bench/pressure.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "config": vars(args),
        "machine": machine(),
        "scenarios": {},
    }
    (ROOT / ".tmp").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bq-bench-pressure-", dir=ROOT / ".tmp") as tmp:
        base = Path(tmp)
        base.chmod(0o755)  # the PostgreSQL user must traverse it when this runs as root
        logdir = base / "logs"
        logdir.mkdir()
        log("starting a throwaway PostgreSQL (fsync on, max_connections 500)")
        with drain.Cluster(base, conf=["max_connections = 500"]) as pg:
            url = pg.create_database("bench")
            report["server"] = {
                **pg.facts(),
                "max_connections": drain_show(url, "max_connections"),
            }
            drain.setup_django(url, SETTINGS)
            env = {"DJANGO_SETTINGS_MODULE": SETTINGS, "BENCH_APPLICATION_NAME": WORKER_APP}
            workers = drain.Workers(
                args.workers,
                concurrency=args.concurrency,
                burst=False,
                env=env,
                logdir=logdir,
                tag="pressure",
                sweep=True,
            )
            with workers as w:
                report["worker_command"] = w.shown
                peak = measure_peak(args.phase_seconds, args.peak_jobs)
                rate = peak / 2 if args.rate == "auto" else float(args.rate)
                report["peak_per_s"] = round(peak, 1)
                report["offered_per_s"] = round(rate, 1)
                log(f"peak {peak:.0f} jobs/s; offering {rate:.0f} jobs/s")
                producer = Producer(rate)
                pressure = Pressure(url, producer)
                backlog = args.peak_jobs  # enqueued by the peak drain, all done by now
                with Depth(url, lambda: backlog + producer.enqueued) as depth:
                    producer.start()
                    try:
                        for name in scenarios:
                            report["scenarios"][name] = run_scenario(
                                name,
                                getattr(pressure, name),
                                args.phase_seconds,
                                producer,
                                depth,
                                rate,
                            )
                    finally:
                        producer.stop()
                    report["nothing_lost"] = settle(args.peak_jobs + producer.enqueued)
        if args.keep_logs:  # the workers' own logs (back-offs, reconnections) outlive the run
            shutil.copytree(logdir, args.keep_logs, dirs_exist_ok=True)
            log(f"worker logs in {args.keep_logs}")
    log(f"nothing lost: {report['nothing_lost']}")
    for name, s in report["scenarios"].items():
        log(f"{name}: goals {s['goals']}")
    if not args.no_write:
        RESULTS.write_text(json.dumps(report, indent=2, default=str) + "\n")
        log(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


def drain_show(url: str, setting: str) -> str:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(f"SHOW {setting}").fetchone()
        assert row is not None
        return str(row[0])


def settle(enqueued: int, timeout: float = 300.0) -> dict[str, Any]:
    """Wait for the workers to finish what was offered; every job done once, none missing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        counts = dict(drain.sql("SELECT state, count(*) FROM blamequeue_job GROUP BY state"))
        waiting = sum(n for state, n in counts.items() if state not in ("done", "failed"))
        if sum(counts.values()) >= enqueued and not waiting:
            break
        time.sleep(1.0)
    counts = dict(drain.sql("SELECT state, count(*) FROM blamequeue_job GROUP BY state"))
    ((attempts_max,),) = drain.sql("SELECT max(attempts) FROM blamequeue_job")
    return {
        "enqueued": enqueued,
        "states": counts,
        "max_attempts_used": attempts_max,
        "ok": counts.get("done", 0) == enqueued and set(counts) == {"done"},
    }


if __name__ == "__main__":
    sys.exit(main())
