#!/usr/bin/env python
"""django-blamequeue side by side with its peers, one run, one machine, one workload (not a test).

    .venv/bin/python bench/peers.py [--n 5000] [--concurrency 16] [--only KEY,...] [--no-write]
                                    [--workloads noop,orm] [--orm-n 3000] [--orm-concurrency 10]
    .venv/bin/python bench/peers.py --setup        # only create the peers' virtualenv

Contenders, one after the other: django-blamequeue on PostgreSQL and on Redis, Procrastinate
and django-tasks-db on PostgreSQL, Celery and RQ on Redis. Two workloads (``--workloads``): no-op
jobs (every contender), and ORM jobs that read one row and write one row through the Django ORM
with Django's default ``CONN_MAX_AGE=0`` (django-blamequeue on PostgreSQL, Celery with its
Django fix-up in the threads and the prefork pool, Procrastinate through its Django
integration). The script starts one PostgreSQL
(fsync on) and one Redis (AOF, ``appendfsync everysec``) with ``tests.servers`` on loopback,
gives each contender its own database (PostgreSQL) or database number (Redis), and runs every
contender in a child process (``bench.peerapps.workload``) that starts the contender's worker
processes itself and stops them by pid. The workload and its measurement are described in
``bench/peerapps/workload.py`` and on the page ``docs/benchmarks-peers.md``.

The peers live in their own virtualenv, ``.tmp/bench-peers/venv``, with the versions pinned in
``PINS`` (created here on first use); django-blamequeue runs from the project's ``.venv``, whose
dependencies this script never changes.

Writes ``bench/results/peers.json``, the generated block of ``docs/benchmarks-peers.md``
(between the ``bench:begin``/``bench:end`` markers; the prose around it is kept) and
``docs/img/peers.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.peerapps.harness import log  # noqa: E402
from bench.peerapps.rounds import busy_cpu, merge, own_cpu  # noqa: E402

VENV = ROOT / ".tmp" / "bench-peers" / "venv"
RESULTS = ROOT / "bench" / "results" / "peers.json"

#: What the peers' virtualenv holds (exact versions: a rerun compares like with like).
PINS = (
    "procrastinate==3.10.0",
    "celery[redis]==5.7.0",
    "rq==2.12.0",
    "django-tasks-db==0.13.0",
    "Django==6.1.3",
    "psycopg[binary]==3.3.9",
    "redis==8.1.0",
)

#: key -> (interpreter: "project" or "peers", {env var: URL template}); {pg}/{redis} filled in.
CONTENDERS: dict[str, tuple[str, dict[str, str]]] = {
    "blamequeue-postgres": ("project", {"BENCH_DATABASE_URL": "{pg}/bq_postgres"}),
    "blamequeue-redis": (
        "project",
        {"BENCH_DATABASE_URL": "{pg}/bq_redis", "BENCH_REDIS_URL": "{redis}/1"},
    ),
    "procrastinate": ("peers", {"BENCH_PROCRASTINATE_DSN": "{pg}/procrastinate"}),
    "procrastinate-django": ("peers", {"BENCH_ORM_DATABASE_URL": "{pg}/procrastinate_django"}),
    "django-tasks-db": ("peers", {"BENCH_TASKSDB_URL": "{pg}/tasksdb"}),
    "celery": (
        "peers",
        {
            "BENCH_CELERY_BROKER": "{redis}/2",
            "BENCH_CELERY_RECORD_DIR": "{base}/celery",
            "BENCH_ORM_DATABASE_URL": "{pg}/celery_orm",
        },
    ),
    "rq": ("peers", {"BENCH_RQ_URL": "{redis}/3"}),
}


# ------------------------------------------------------------------------ the peers' venv
def setup_venv() -> dict[str, str]:
    """Create ``.tmp/bench-peers/venv`` with ``PINS`` unless it already has them; answer
    ``pip freeze`` of it as {name: version}."""
    python = VENV / "bin" / "python"
    stamp = VENV / "bench-pins.txt"
    wanted = "\n".join(PINS) + "\n"
    if not python.exists() or not stamp.exists() or stamp.read_text() != wanted:
        log(f"creating {VENV.relative_to(ROOT)} with {', '.join(PINS)}")
        # The base interpreter, not the project's .venv: nothing of the project leaks in.
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *PINS],
            check=True,
        )
        stamp.write_text(wanted)
    freeze = subprocess.run(
        [str(python), "-m", "pip", "freeze", "--disable-pip-version-check"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(line.split("==", 1) for line in freeze.splitlines() if "==" in line)


# ------------------------------------------------------------------------ servers
def server_facts(pg_url: str, redis_url: str) -> dict[str, Any]:
    import psycopg
    import redis

    with psycopg.connect(pg_url, autocommit=True) as conn:
        pg = {
            k: conn.execute(f"SHOW {k}").fetchone()[0]  # type: ignore[index]
            for k in ("server_version", "fsync", "synchronous_commit", "shared_buffers")
        }
    client = redis.Redis.from_url(redis_url)
    info = client.info("server")
    config = {k: client.config_get(k)[k] for k in ("appendonly", "appendfsync", "save")}
    return {"postgres": pg, "redis": {"version": info["redis_version"], **config}}


def machine() -> dict[str, Any]:
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


# ------------------------------------------------------------------------ one contender
def run_contender(
    key: str,
    python: str,
    env: dict[str, str],
    cfg: dict[str, Any],
    server_pids: list[int],
    module: str = "bench.peerapps.workload",
) -> dict[str, Any]:
    """Run one contender's child (``python -m module KEY CFG``); its result, or {"error": why}
    with the tail of its stderr.

    Also measures what the rest of the machine did meanwhile: the CPU every process spent
    busy, less this benchmark's own (its children, their workers, its servers), in cores.
    """
    load0 = os.getloadavg()
    started = time.perf_counter()
    busy0, own0 = busy_cpu(), own_cpu(server_pids)
    proc = subprocess.Popen(
        [python, "-m", module, key, json.dumps(cfg)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    tail: list[str] = []

    def relay() -> None:  # the child's progress, live, keeping the last lines for an error
        assert proc.stderr is not None
        for line in proc.stderr:
            sys.stderr.write(line)
            if line.strip():
                tail[:] = [*tail[-2:], line.strip()]

    relayer = threading.Thread(target=relay, daemon=True)
    relayer.start()
    stdout = proc.stdout.read() if proc.stdout else ""
    proc.wait()
    relayer.join()
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    out: dict[str, Any]
    if proc.returncode == 0 and lines:
        out = json.loads(lines[-1][len("RESULT ") :])
    else:
        out = {"key": key, "error": f"exit {proc.returncode}: " + " / ".join(tail)}
    wall = time.perf_counter() - started
    others = (busy_cpu() - busy0) - (own_cpu(server_pids) - own0)
    out["loadavg_start"] = load0
    out["loadavg_end"] = os.getloadavg()
    out["elapsed_s"] = wall
    out["others_cpu"] = max(0.0, others / wall)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--n", type=int, default=5000, help="jobs per enqueue run and drain")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=16,
        help="slots per worker process where the library has them (default 16)",
    )
    parser.add_argument("--batch", type=int, default=1000, help="jobs per bulk enqueue call")
    parser.add_argument("--latency-jobs", type=int, default=200)
    parser.add_argument("--latency-interval", type=float, default=0.02, help="seconds")
    parser.add_argument("--only", default="", help="comma-separated contender keys")
    parser.add_argument(
        "--workloads",
        default="noop,orm",
        help="comma-separated: noop (every contender), orm (read one row and write one row "
        "through the Django ORM: django-blamequeue on PostgreSQL, Celery, Procrastinate's "
        "Django integration); default both",
    )
    parser.add_argument("--orm-n", type=int, default=3000, help="ORM jobs per drain (3000)")
    parser.add_argument(
        "--orm-concurrency",
        type=int,
        default=10,
        help="slots (threads, processes) per worker for the ORM workload (10)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="rounds of every contender, order reversed every other round; each measurement "
        "keeps its best round (default 2)",
    )
    parser.add_argument("--setup", action="store_true", help="create the peers' venv and stop")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument(
        "--render",
        action="store_true",
        help="measure nothing: rewrite the page and the plot from bench/results/peers.json",
    )
    args = parser.parse_args(argv)
    if args.render:
        from bench.peerapps import report as render

        saved = json.loads(RESULTS.read_text())
        print(render.text_table(saved))
        render.write_doc(saved)
        render.write_plot(saved)
        return 0

    try:
        peer_versions: dict[str, str] | None = setup_venv()
        venv_error = ""
    except (OSError, subprocess.CalledProcessError) as exc:
        peer_versions, venv_error = None, f"the peers' virtualenv could not be made: {exc}"
        log(venv_error)
    if args.setup:
        print(json.dumps(peer_versions, indent=1))
        return 0 if peer_versions else 1

    keys = [k for k in CONTENDERS if not args.only or k in args.only.split(",")]
    cfg: dict[str, Any] = {
        "n": args.n,
        "batch": args.batch,
        "concurrency": args.concurrency,
        "latency_jobs": args.latency_jobs,
        "latency_interval": args.latency_interval,
        "drain_timeout": 900,
        "rounds": args.rounds,
        "workloads": args.workloads.split(","),
        "orm_n": args.orm_n,
        "orm_concurrency": args.orm_concurrency,
    }
    report: dict[str, Any] = {
        "command": (
            "bench/peers.py " + " ".join(argv if argv is not None else sys.argv[1:])
        ).strip(),
        "config": cfg,
        "machine": machine(),
        "pins": list(PINS),
        "peer_venv": peer_versions,
        "rounds": [],
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bq-peers-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)  # traversable by the PostgreSQL user when this runs as root
        logdir = VENV.parent / "logs"  # kept after the run: the workers' output
        shutil.rmtree(logdir, ignore_errors=True)
        logdir.mkdir(parents=True)
        cfg["logdir"] = str(logdir)
        (base / "celery").mkdir()
        from tests.servers import PostgresServer, RedisServer

        pg = PostgresServer(base / "pg")
        rd = RedisServer(base / "redis", appendonly="everysec")
        log("starting PostgreSQL (fsync on) and Redis (AOF, appendfsync everysec) on loopback")
        pg.start()
        try:
            rd.start()
            import psycopg

            with psycopg.connect(pg.url, autocommit=True) as conn:
                for name in (
                    "bq_postgres",
                    "bq_redis",
                    "procrastinate",
                    "procrastinate_django",
                    "tasksdb",
                    "celery_orm",
                ):
                    conn.execute(f"CREATE DATABASE {name}")
            report["servers"] = server_facts(pg.url, rd.url)
            urls = {
                "pg": pg.url.rsplit("/", 1)[0],
                "redis": rd.url.rsplit("/", 1)[0],
                "base": str(base),
            }
            clean = {
                k: v for k, v in os.environ.items() if not k.startswith(("BENCH_", "BLAMEQUEUE_"))
            }
            for r in range(args.rounds):
                order = keys if r % 2 == 0 else keys[::-1]
                results: dict[str, dict[str, Any]] = {}
                for key in order:
                    interpreter, templates = CONTENDERS[key]
                    if interpreter == "peers" and peer_versions is None:
                        results[key] = {"key": key, "error": venv_error}
                        continue
                    env = {
                        **clean,
                        **{k: v.format(**urls) for k, v in templates.items()},
                        "BENCH_PG_PID": str(pg.pid),
                        "BENCH_REDIS_PID": str(rd.pid),
                        "PYTHONPATH": str(ROOT),
                    }
                    python = (
                        sys.executable if interpreter == "project" else str(VENV / "bin" / "python")
                    )
                    log(
                        f"round {r + 1}/{args.rounds}, {key}: running "
                        f"(load average {os.getloadavg()[0]:.1f})"
                    )
                    pids = [pid for pid in (pg.pid, rd.pid) if pid]
                    results[key] = run_contender(key, python, env, cfg, pids)
                report["rounds"].append([results[k] for k in keys])
        finally:
            rd.stop()
            pg.stop()
    report["contenders"] = merge(report["rounds"])
    report["elapsed_s"] = time.perf_counter() - started
    report["finished"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")

    from bench.peerapps import report as render

    print()
    print(render.text_table(report))
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(report, indent=1, default=str) + "\n")
        render.write_doc(report)
        render.write_plot(report)
        print(
            f"\nwrote {render.DOC.relative_to(ROOT)}, {render.PLOT.relative_to(ROOT)}, "
            f"{RESULTS.relative_to(ROOT)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
