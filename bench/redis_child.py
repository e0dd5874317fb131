"""The Redis part of ``bench/throughput.py``: the same measurements on the redis backend.

The driver starts a throwaway ``redis-server`` with AOF ``appendfsync everysec`` (the setting
the docs recommend) and runs a child with ``BENCH_REDIS_URL`` set: ``bench.settings`` then makes
the default backend redis, and a fresh SQLite file holds only Django's own tables (audit and
outbox rows; the happy path writes none). Jobs are read back through Redis: the drain window is
``min(started)`` .. ``max(finished)`` of the done jobs as Redis ``TIME`` stamped them, and the
server's CPU is the redis-server process's.

Its figures go to their own generated section of ``docs/benchmarks.md`` (between the
``bench:redis:begin``/``bench:redis:end`` markers) and to ``bench/results/redis-latest.json``,
so a Redis run never overwrites the SQLite/PostgreSQL section, nor the other way round.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.throughput import DOC, ROOT, Child, _proc_cpu, log

RESULTS = Path("bench/results/redis-latest.json")
BEGIN, END = "<!-- bench:redis:begin -->", "<!-- bench:redis:end -->"
#: The target for Redis on this machine: no-op jobs drained by 2 worker processes.
TARGET_DRAIN_2 = 12000


class RedisChild(Child):
    """``Child`` with the jobs in Redis: counts, windows and latencies read from its keys."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        from django_blamequeue.backends import get_backend

        self.backend: Any = get_backend()
        self.redis_pid = int(os.environ["BENCH_REDIS_PID"])
        self.vendor = "redis"
        self.result["vendor"] = "redis"

    def reset(self) -> None:
        super().reset()  # the SQLite side: audit and outbox rows
        self.backend.client.flushdb()

    def analyze(self) -> None:
        pass

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for s in self.backend.stats():
            for state, n in s.counts.items():
                if n:
                    found[state] = found.get(state, 0) + n
        return found

    def done_count(self) -> int:
        return self.counts().get("done", 0)

    def _stamps(self, ids: list[str], *fields: str) -> list[list[int]]:
        pipe = self.backend.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(self.backend.keys.job(job_id), *fields)
        return [[int(v) for v in row] for row in pipe.execute()]

    def _done_ids(self) -> list[str]:
        key = self.backend.keys.queue("bench", "done")
        return [raw.decode() for raw in self.backend.client.zrange(key, 0, -1)]

    def drain_window(self) -> dict[str, Any]:
        rows = self._stamps(self._done_ids(), "started", "finished", "attempts")
        n = len(rows)
        seconds = (max(r[1] for r in rows) - min(r[0] for r in rows)) / 1e6
        return {
            "jobs": n,
            "seconds": seconds,
            "rate": n / seconds if seconds > 0 else float("inf"),
            "claim_batch": n / max(len({r[0] for r in rows}), 1),
            "ack_batch": n / max(len({r[1] for r in rows}), 1),
            "max_attempts": max(r[2] for r in rows),
        }

    def measure_drain(self, workers: int, n: int, tag: str) -> dict[str, Any]:
        cpu0 = _proc_cpu(self.redis_pid, children=False)
        window = super().measure_drain(workers, n, tag)
        window["server_cpu_us"] = 1e6 * (_proc_cpu(self.redis_pid, children=False) - cpu0) / n
        log(f"redis: server CPU {window['server_cpu_us']:.0f} µs/job")
        return window

    def latency_rows(self, ids: list[str]) -> list[tuple[datetime, datetime]]:
        from django_blamequeue.backends.redis.keys import from_us

        out = []
        for created, started in self._stamps(ids, "created", "started"):
            c, s = from_us(created), from_us(started)
            assert c is not None and s is not None
            out.append((c, s))
        return out

    def describe_server(self) -> None:
        client = self.backend.client
        server, persistence = client.info("server"), client.info("persistence")
        memory = client.info("memory")
        self.result["server_version"] = server["redis_version"]
        self.result["settings"] = {
            "appendonly": "yes" if persistence.get("aof_enabled") else "no",
            "appendfsync": client.config_get("appendfsync").get("appendfsync"),
            "maxmemory_policy": memory.get("maxmemory_policy"),
        }
        import redis

        self.result["redis_py"] = redis.__version__


def run_redis(base: Path, cfg: dict[str, Any], run_child: Callable[..., Any]) -> Any:
    """Start redis-server (AOF everysec), run the child against it, stop it."""
    from tests.servers import RedisServer

    server = RedisServer(base / "redis", appendonly="everysec")
    log("Redis: starting a throwaway server (appendonly yes, appendfsync everysec)")
    server.start()
    try:
        return run_child(
            "redis",
            f"sqlite:///{base / 'redis-django.sqlite3'}",
            cfg,
            None,
            {"BENCH_REDIS_URL": server.url, "BENCH_REDIS_PID": str(server.pid)},
        )
    finally:
        server.stop()


def _rows(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    def get(*path: str) -> Any:
        d: Any = r
        for key in path:
            if not isinstance(d, dict) or key not in d:
                return None
            d = d[key]
        return d

    def rate(*path: str) -> str:
        v = get(*path)
        return "—" if v is None else f"{v:,.0f}"

    def cpu(path: str) -> str:
        w, s = get(path, "worker_cpu_us"), get(path, "server_cpu_us")
        return "—" if w is None else f"{w:,.0f} + {s:,.0f}"

    drain2 = get("drain_2", "rate")
    verdict = ""
    if drain2 is not None:
        verdict = (
            "met"
            if drain2 >= TARGET_DRAIN_2
            else f"missed by {100 * (TARGET_DRAIN_2 - drain2) / TARGET_DRAIN_2:.0f} %"
        )
    producers = get("single_parallel", "producers") or "N"
    return [
        ("single enqueues, 1 thread (jobs/s)", rate("single", "rate"), ""),
        (f"single enqueues, {producers} threads (jobs/s)", rate("single_parallel", "rate"), ""),
        ("enqueue_many (jobs/s)", rate("enqueue_many", "rate"), ""),
        ("drain, 1 worker process (jobs/s)", rate("drain_1", "rate"), ""),
        (
            "drain, 2 worker processes (jobs/s)",
            rate("drain_2", "rate"),
            f"≥ {TARGET_DRAIN_2:,}: {verdict}",
        ),
        (
            "  claim / ack batch, 2 workers (jobs)",
            f"{get('drain_2', 'claim_batch') or 0:.1f} / {get('drain_2', 'ack_batch') or 0:.1f}",
            "",
        ),
        ("  CPU per job, 2 workers: workers + redis-server (µs)", cpu("drain_2"), ""),
        ("enqueue→start p50, idle workers (ms)", f"{get('latency', 'p50') or 0:.1f}", ""),
        ("enqueue→start p99, idle workers (ms)", f"{get('latency', 'p99') or 0:.1f}", ""),
    ]


HEADER = ("measurement", "Redis", "target")


def text_report(report: dict[str, Any], text_table: Callable[..., str]) -> str:
    return text_table(HEADER, _rows(report["results"]["redis"]))


def section(report: dict[str, Any], markdown_table: Callable[..., str]) -> str:
    m, r, cfg = report["machine"], report["results"]["redis"], report["config"]
    st = r["settings"]
    lines = [
        BEGIN,
        f"<!-- written by bench/redis_child.py on {report['finished']}; "
        "edit outside the markers -->",
        "",
        f"Run of {report['finished']} (`{report['command']}`, {report['elapsed_s']:.0f} s).",
        "",
        f"- Machine: {m['nproc']} CPUs ({m['cpu']}); load average {m['loadavg_start'][0]:.1f} "
        f"at the start and {m['loadavg_end'][0]:.1f} at the end (the machine is shared: other "
        "processes ran during the measurement).",
        f"- Redis {r['server_version']} (appendonly {st['appendonly']}, appendfsync "
        f"{st['appendfsync']}, maxmemory-policy {st['maxmemory_policy']}) started by "
        f"`tests.servers` on loopback; redis-py {r.get('redis_py', '?')} (pure-Python parser); "
        "Django's own tables on SQLite.",
        f"- N = {cfg['n']:,} no-op jobs per drain; workers `manage.py runworker bench --no-sweep "
        f"--concurrency {cfg['concurrency']} --burst`; latency: {cfg['latency_jobs']} jobs one "
        f"every {cfg['latency_interval'] * 1000:g} ms with 2 idle workers woken by pub/sub.",
        "",
        markdown_table(HEADER, _rows(r)),
        "",
        "CPU per job: the worker processes' CPU (less what one spends starting and stopping) "
        "and the redis-server process's, divided by the jobs drained.",
        "",
        END,
    ]
    return "\n".join(lines)


def write(report: dict[str, Any], markdown_table: Callable[..., str]) -> None:
    text = section(report, markdown_table)
    doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        doc = head + text + rest.split(END, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n## Redis\n\n" + text + "\n"
    DOC.write_text(doc)
    path = ROOT / RESULTS
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")
