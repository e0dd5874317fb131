"""Several rounds of the peer benchmark folded into one figure per measurement.

The machine is shared and the contenders run one after the other, so whoever runs during a
busy minute loses. ``bench/peers.py`` therefore runs the contenders in rounds, the order
reversed every other round, and each measurement keeps its best value over the rounds (as
``timeit`` keeps the fastest repetition): the figure closest to what the library does when
nothing else competes for the CPUs. Every round's own values stay in the report.
"""

from __future__ import annotations

import copy
import os
import resource
from typing import Any

from bench.peerapps.harness import server_cpu


def busy_cpu() -> float:
    """CPU seconds the whole machine has spent busy (every core, every process)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu(server_pids: list[int]) -> float:
    """CPU of this process, of every child it reaped (the contenders and their workers) and of
    the benchmark's servers."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total + sum(server_cpu(pid) for pid in server_pids)


def _total_cpu(row: dict[str, Any]) -> float:
    d = row["drain"]
    return float(d["worker_cpu_us"] + sum((d.get("server_cpu_us") or {}).values()))


def merge(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One result per contender (same shape as a round's): per row, the best bulk and single
    rate, the drain of the fastest round, the CPU of the thriftiest round, the latency of the
    round with the lowest p50 (ORM rows: the drain and the CPU alike); ``row["rounds"]`` keeps
    every round's figures."""
    merged = []
    for k, first in enumerate(rounds[0]):
        runs = [r[k] for r in rounds if "error" not in r[k]]
        if not runs:
            merged.append(first)
            continue
        out = copy.deepcopy(runs[0])
        out["loadavg"] = [(r["loadavg_start"], r["loadavg_end"]) for r in runs]
        out["others_cpu"] = [r.get("others_cpu") for r in runs]
        out["errors"] = [r[k]["error"] for r in rounds if "error" in r[k]]
        for i, row in enumerate(out["rows"]):
            rows = [r["rows"][i] for r in runs]
            for phase in ("bulk", "single"):
                if phase in row:
                    row[phase] = max((x[phase] for x in rows), key=lambda p: p["rate"])
            row["drain"] = copy.deepcopy(max((x["drain"] for x in rows), key=lambda d: d["rate"]))
            thrifty = min(rows, key=_total_cpu)["drain"]
            row["drain"]["worker_cpu_us"] = thrifty["worker_cpu_us"]
            row["drain"]["server_cpu_us"] = thrifty["server_cpu_us"]
            row["latency"] = min((x["latency"] for x in rows), key=lambda lat: lat["p50"])
            row["rounds"] = [
                {
                    "bulk": (x.get("bulk") or {}).get("rate"),
                    "single": (x.get("single") or {}).get("rate"),
                    "drain": x["drain"]["rate"],
                    "p50": x["latency"]["p50"],
                    "cpu": _total_cpu(x),
                }
                for x in rows
            ]
        for i, row in enumerate(out.get("orm_rows", [])):
            rows = [r["orm_rows"][i] for r in runs]
            row["drain"] = copy.deepcopy(max((x["drain"] for x in rows), key=lambda d: d["rate"]))
            thrifty = min(rows, key=_total_cpu)["drain"]
            row["drain"]["worker_cpu_us"] = thrifty["worker_cpu_us"]
            row["drain"]["server_cpu_us"] = thrifty["server_cpu_us"]
            row["rounds"] = [{"drain": x["drain"]["rate"], "cpu": _total_cpu(x)} for x in rows]
        merged.append(out)
    return merged
