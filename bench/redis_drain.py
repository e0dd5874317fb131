#!/usr/bin/env python
"""The Redis no-op drain, before and after a change, side by side in one run (not a test).

    .venv/bin/python bench/redis_drain.py [--n 20000] [--rounds 3] [--before DIR]
        [--workers 2] [--concurrency 64] [--py-spy DIR] [--loop]

One throwaway redis-server (AOF ``appendfsync everysec``, ``tests.servers``); per round and per
checkout (``--before DIR``: a checkout of the code before, e.g. ``git archive main | tar -x -C
DIR``; then this one) ``--n`` no-op jobs are enqueued and drained by ``--workers``
``runworker --burst`` processes running that checkout's code (``bench/drain.py``'s
``Workers``). Each drain reports jobs/s from the first claim to the last ack as Redis stamped
them, worker CPU per job (less start-up), redis-server CPU per job, and the server's
``INFO commandstats`` per job: the commands the scripts ran, calls and µs. ``--py-spy DIR``
records worker 0 of each drain (``bench/profiling.py``). ``--loop`` adds, per round and
checkout, the backend's own cost without a worker: one process claims 64 jobs and acks them
done with the next claim (``apply_and_claim``) until the queue is empty, and reports its CPU
and redis-server's per job (the part of a drain the redis backend owns; the load moves it far
less than a drain). Prints a table and the medians, writes ``bench/results/redis-drain.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: The checkout whose code runs: this one, or ``--before``'s in a ``--loop`` child.
TREE = Path(os.environ.get("BENCH_TREE") or ROOT)
sys.path.insert(0, str(TREE))

from bench import profiling  # noqa: E402
from bench.drain import Workers, children_cpu, logger, text_table  # noqa: E402
from bench.throughput import _proc_cpu, machine  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "redis-drain.json"
log = logger("redis-drain")


def commandstats(client: Any) -> dict[str, tuple[int, int]]:
    """Calls and µs per command since the last ``CONFIG RESETSTAT`` (script calls included)."""
    out = {}
    for key, value in client.info("commandstats").items():
        out[key.removeprefix("cmdstat_")] = (int(value["calls"]), int(value["usec"]))
    return out


def enqueue(n: int) -> None:
    from bench.jobs import NOOP, QUEUE
    from django_blamequeue import queue

    for start in range(0, n, 1000):
        queue.enqueue_many(QUEUE, [{"i": i} for i in range(start, min(n, start + 1000))], name=NOOP)


def window(backend: Any) -> dict[str, Any]:
    """Rate, batches and attempts of the done jobs, from the stamps Redis wrote."""
    ids = backend.client.zrange(backend.keys.queue("bench", "done"), 0, -1)
    pipe = backend.client.pipeline(transaction=False)
    for raw in ids:
        pipe.hmget(backend.keys.job(raw.decode()), "started", "finished", "attempts")
    rows = [[int(v) for v in row] for row in pipe.execute()]
    seconds = (max(r[1] for r in rows) - min(r[0] for r in rows)) / 1e6
    return {
        "jobs": len(rows),
        "seconds": seconds,
        "rate": len(rows) / seconds,
        "claim_batch": len(rows) / len({r[0] for r in rows}),
        "ack_batch": len(rows) / len({r[1] for r in rows}),
        "max_attempts": max(r[2] for r in rows),
    }


def drain(root: Path, tag: str, args: argparse.Namespace, env: dict[str, str], pid: int) -> Any:
    """One drain by workers running ``root``'s code. The jobs are enqueued by this checkout's
    (a comparison holds while both sides store a job alike), the CPU one worker spends
    starting and stopping on an empty queue is measured first and left out."""
    from django_blamequeue.backends import get_backend

    backend = get_backend()
    logdir = Path(env["BENCH_LOGDIR"])

    def workers(count: int, name: str) -> Workers:
        return Workers(
            count,
            concurrency=args.concurrency,
            burst=True,
            env=env,
            logdir=logdir,
            tag=name,
            code=root,
        )

    backend.client.flushdb()
    cpu0 = children_cpu()
    with workers(1, f"{tag}-startup") as w:
        while w.running():
            time.sleep(0.05)
    startup = children_cpu() - cpu0
    enqueue(args.n)
    backend.client.config_resetstat()
    cpu0, redis0 = children_cpu(), _proc_cpu(pid, children=False)
    spy = profiling.Spy(args.py_spy, tag)
    with workers(args.workers, tag) as w:
        while w.banner_value("concurrency") is None and w.running():
            time.sleep(0.02)
        spy.start(w.procs[0].pid, 0)
        while w.running():
            time.sleep(0.1)
    recorded = spy.stop()
    n = args.n
    worker_cpu = children_cpu() - cpu0 - args.workers * startup
    redis_cpu = _proc_cpu(pid, children=False) - redis0
    stats = commandstats(backend.client)  # before the read-back below adds its own
    out = window(backend)
    if out["jobs"] != n:
        raise RuntimeError(f"{tag}: {out['jobs']} of {n} jobs done; see {logdir}")
    out["worker_cpu_us"] = 1e6 * worker_cpu / n
    out["redis_cpu_us"] = 1e6 * redis_cpu / n
    out["commands"] = {
        name: {"calls": calls / n, "us": usec / n}
        for name, (calls, usec) in sorted(stats.items(), key=lambda kv: -kv[1][1])
        if name not in ("info", "config|resetstat")
    }
    out["load"] = os.getloadavg()[0]
    if recorded is not None:
        out["py_spy"] = profiling.summarize(recorded, n // args.workers)
    log(
        f"{tag}: {out['rate']:,.0f} jobs/s, worker CPU {out['worker_cpu_us']:.0f} µs/job, "
        f"redis-server {out['redis_cpu_us']:.0f} µs/job, claims of {out['claim_batch']:.1f}, "
        f"acks of {out['ack_batch']:.1f} (load {out['load']:.1f})"
    )
    return out


def loop_child(n: int) -> None:
    """``--loop`` in a child whose ``sys.path`` starts at ``BENCH_TREE``: prints a JSON line."""
    import django

    import django_blamequeue

    django.setup()
    from bench.throughput import _proc_cpu as cpu_of
    from django_blamequeue.backends import get_backend
    from django_blamequeue.core.payload import Encoded
    from django_blamequeue.core.records import Ack, Transition
    from django_blamequeue.core.states import State

    backend = get_backend()
    backend.client.flushdb()
    enqueue(n)
    pid, result = int(os.environ["BENCH_REDIS_PID"]), Encoded("application/json", "utf-8", b"null")
    redis0, cpu0, t0 = cpu_of(pid, False), time.process_time(), time.perf_counter()
    claimed, done = backend.claim(["bench"], 64, 60.0), 0
    while claimed:
        acks = [
            Ack(
                job_id=c.job_id,
                token=c.token,
                transition=Transition(state=State.DONE, result=result),
            )
            for c in claimed
        ]
        done += len(acks)
        claimed = backend.apply_and_claim(acks, ["bench"], 64, 60.0)[1]
    seconds = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "jobs": done,
                "rate": done / seconds,
                "client_cpu_us": 1e6 * (time.process_time() - cpu0) / done,
                "redis_cpu_us": 1e6 * (cpu_of(pid, False) - redis0) / done,
                "load": os.getloadavg()[0],
                "package": django_blamequeue.__file__,
            }
        )
    )


def loop(root: Path, tag: str, n: int, env: dict[str, str]) -> Any:
    """One ``--loop`` measurement of ``root``'s code, in a child process."""
    import subprocess

    child_env = {**os.environ, **env, "BENCH_TREE": str(root), "PYTHONPATH": str(root)}
    command = [sys.executable, __file__, "--loop-child", "--n", str(n)]
    done = subprocess.run(command, env=child_env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{tag}: the loop failed:\n{done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert str(root) in out["package"], out["package"]
    log(
        f"{tag} loop: {out['rate']:,.0f} jobs/s, client CPU {out['client_cpu_us']:.1f} µs/job, "
        f"redis-server {out['redis_cpu_us']:.1f} µs/job (load {out['load']:.1f})"
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--before", type=Path, help="a checkout of the code before the change")
    parser.add_argument("--py-spy", type=Path, help="record worker 0 of each drain into DIR")
    parser.add_argument("--loop", action="store_true", help="also the claim/ack loop alone")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--loop-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop_child:
        loop_child(args.n)
        return 0
    from tests.servers import RedisServer

    base = Path(tempfile.mkdtemp(prefix="bq-redis-drain-"))
    (base / "logs").mkdir()
    server = RedisServer(base / "redis", appendonly="everysec")
    server.start()
    env = {
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "BENCH_DATABASE_URL": f"sqlite:///{base / 'django.sqlite3'}",
        "BENCH_REDIS_URL": server.url,
        "BENCH_LOGDIR": str(base / "logs"),
        "BENCH_REDIS_PID": str(server.pid),
    }
    os.environ.update(env)
    sides = {"before": args.before.resolve(), "after": ROOT} if args.before else {"after": ROOT}
    load0 = os.getloadavg()
    try:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        assert server.pid is not None
        rounds: list[dict[str, Any]] = []
        for r in range(1, args.rounds + 1):
            rounds.append({})
            for side, root in sides.items():
                rounds[-1][side] = drain(root, f"{side}{r}", args, env, server.pid)
                if args.loop:
                    rounds[-1][side]["loop"] = loop(root, f"{side}{r}", args.n, env)
    finally:
        server.stop()
    rows, medians = [], {}
    for side in sides:
        got = [r[side] for r in rounds]
        for i, d in enumerate(got, 1):
            cpu = f"{d['worker_cpu_us']:.0f} + {d['redis_cpu_us']:.0f}"
            lp = d.get("loop")
            alone = f"{lp['client_cpu_us']:.1f} + {lp['redis_cpu_us']:.1f}" if lp else "—"
            rows.append((f"{side} {i}", f"{d['rate']:,.0f}", cpu, alone, f"{d['load']:.1f}"))
        medians[side] = {
            key: statistics.median(d[key] for d in got)
            for key in ("rate", "worker_cpu_us", "redis_cpu_us")
        }
        if args.loop:
            for key in ("client_cpu_us", "redis_cpu_us"):
                medians[side][f"loop_{key}"] = statistics.median(d["loop"][key] for d in got)
    header = ("drain", "jobs/s", "CPU µs/job: workers + redis", "loop: client + redis", "load")
    print(text_table(header, rows))
    for side, m in medians.items():
        print(f"{side}: median " + ", ".join(f"{k} {v:,.1f}" for k, v in m.items()))
    last = rounds[-1]["after"]["commands"]
    print("after, last round: redis commands per job (calls, µs):")
    for name, c in list(last.items())[:12]:
        print(f"  {name:24} {c['calls']:6.2f} {c['us']:7.2f}")
    result = {
        "command": "bench/redis_drain.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "load_average": [load0, os.getloadavg()],
        "config": {k: str(v) for k, v in vars(args).items()},
        "rounds": rounds,
        "medians": medians,
    }
    if not args.no_write:
        RESULTS.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
