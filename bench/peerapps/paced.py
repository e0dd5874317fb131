"""One contender under a steady, paced load: ``python -m bench.peerapps.paced KEY CONFIG_JSON``.

``bench/latency.py`` starts it with the contender's interpreter; it prints one ``RESULT {json}``
line. First the peak: ``peak_n`` jobs enqueued in bulk and drained by the contender's workers
(``workload.Run.drain``, the peers benchmark's own drain). Then one set of the same workers,
kept running, serves phases of ``phase_seconds`` at each fraction of that peak in ``loads``.

The producer is paced by credit on wall-clock time: at every step it owes
``floor(elapsed · rate) + 1`` jobs since the phase began, and enqueues what it owes in one call
(a bulk call where the library has one, at most ``max_batch``), so a slow enqueue is made up at
once rather than lowering the offered rate. Each job is stamped (``probe.started``); a phase's
latencies are the probe's histogram. Queue depth is sampled every second as jobs sent less
handlers started. After a phase the next waits until every job of it has started, for at
most ``settle_s``: a backlog that outlasts that is carried into the next phase (the table
marks the phase "backlog left").
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.hdr import Histogram
from bench.peerapps.harness import Contender, Variant, log, wait_for
from bench.peerapps.probe import Receiver
from bench.peerapps.workload import CONTENDERS, Run

#: Our contenders run as "out of the box": two ``runworker`` with the default concurrency.
DEFAULT_RUNWORKER = Variant("default", "2 × `runworker` (default concurrency: 10 slots)", 2, {})


def variant_of(c: Contender) -> Variant:
    if c.key.startswith("blamequeue"):
        return DEFAULT_RUNWORKER
    return c.variants[0]


def peak(run: Run, variant: Variant) -> dict[str, Any]:
    """Jobs/s of a burst drain of ``peak_n`` jobs by ``variant``'s workers."""
    n = run.cfg["peak_n"]
    run.c.reset()
    ids: list[str] = []
    if run.c.bulk_api is not None:
        for start in range(0, n, 1000):
            ids += run.c.enqueue_bulk(start, min(n, start + 1000))
    else:
        ids = [run.c.enqueue_one(i) for i in range(n)]
    return run.drain(variant, ids)


def phase(
    c: Contender, rx: Receiver, index: int, rate: float, seconds: float, cap: int
) -> dict[str, Any]:
    """Offer ``rate`` jobs/s for ``seconds``; what was sent, served and how deep the queue got."""
    sent, calls, behind = 0, 0, 0.0
    depths: list[int] = []
    since = time.time()
    enqueue = Histogram()  # the producer's enqueue calls, ms: part of every job's latency
    t0 = time.perf_counter()
    next_depth = t0 + 1.0
    while True:
        now = time.perf_counter()
        elapsed = now - t0
        if elapsed >= seconds:
            break
        owed = math.floor(elapsed * rate) + 1 - sent
        if owed > 0:
            behind = max(behind, (owed - 1) / rate)
            n = min(owed, cap)
            t = time.perf_counter()
            c.enqueue_stamped(index, n)
            enqueue.record((time.perf_counter() - t) * 1000)
            sent += n
            calls += 1
        else:
            time.sleep(max(0.0, min(sent / rate - elapsed, next_depth - now)))
        if now >= next_depth:
            depths.append(sent - rx.count(index))
            next_depth += 1.0
    wall = time.perf_counter() - t0
    served_in_phase = rx.count(index)
    return {
        "offered_rate": rate,
        "seconds": wall,
        "sent": sent,
        "sent_rate": sent / wall,
        "enqueue_calls": calls,
        "producer_behind_max_s": behind,
        "served_in_phase": served_in_phase,
        "served_rate": served_in_phase / wall,
        "depth_mean": sum(depths) / len(depths) if depths else 0.0,
        "depth_max": max(depths) if depths else 0,
        "enqueue_call_ms": enqueue.summary(),
        "claim_batch": c.claim_batch(since, time.time()) if hasattr(c, "claim_batch") else None,
    }


def settled(rx: Receiver, phase: int, sent: int) -> Callable[[], bool]:
    return lambda: rx.count(phase) >= sent


def main(argv: list[str]) -> int:
    key, cfg = argv[0], json.loads(argv[1])
    socket_path = Path(cfg["logdir"]) / f"probe-{key}.sock"
    os.environ["BENCH_LATENCY_SOCKET"] = str(socket_path)  # the workers inherit it
    module, name = CONTENDERS[key].split(":")
    c: Contender = getattr(importlib.import_module(module), name)({**cfg, "key": key})
    run = Run(c)
    variant = variant_of(c)
    top = peak(run, variant)
    log(f"{key}: peak {top['rate']:,.0f} jobs/s ({variant.label})")
    rx = Receiver(socket_path)
    phases = []
    c.reset()
    try:
        with run.workers(variant, burst=False, tag="paced"):
            c.enqueue_stamped(0, 20)  # warm-up: workers up, connected, listening
            wait_for(lambda: rx.count(0) >= 20, 120, "the warm-up jobs")
            time.sleep(1.0)
            for k, share in enumerate(cfg["loads"], start=1):
                rate = share * top["rate"]
                row = phase(c, rx, k, rate, cfg["phase_seconds"], cfg["max_batch"])
                try:
                    wait_for(settled(rx, k, row["sent"]), cfg["settle_s"], "the phase")
                    row["settled"] = True
                except RuntimeError:
                    row["settled"] = False
                h, enq = rx.histogram(k), row["enqueue_call_ms"]
                row.update(load=share, latency_ms=h.summary(), histogram=h.to_json())
                log(
                    f"{key}: {share:.0%} of peak = {rate:,.0f}/s offered, {row['sent_rate']:,.0f} "
                    f"sent, {row['served_rate']:,.0f} served/s; p50 {h.percentile(50):.2f} ms, "
                    f"p95 {h.percentile(95):.2f}, p99 {h.percentile(99):.2f}, max {h.max:.1f}; "
                    f"depth mean {row['depth_mean']:.1f}, max {row['depth_max']}; enqueue call "
                    f"p50 {enq['p50']:.2f} ms, p99 {enq['p99']:.2f}; jobs per claim "
                    f"{row['claim_batch'] or 0:.1f}"
                )
                phases.append(row)
    finally:
        rx.close()
    c.reset()
    out = {**c.describe(), "variant": variant.label, "peak": top, "phases": phases}
    print("RESULT " + json.dumps(out, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
