"""Tables, the generated block of docs/benchmarks-peers.md and docs/img/peers.png.

Runs in the project's .venv (matplotlib), from the report ``bench/peers.py`` assembled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.peerapps.harness import ROOT

DOC = ROOT / "docs" / "benchmarks-peers.md"
PLOT = ROOT / "docs" / "img" / "peers.png"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
OURS = ("blamequeue-postgres", "blamequeue-redis")
AS_ABOVE = "as above"


def get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def rate(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f}"


def entries(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat entry per measured (contender, worker setup), in run order."""
    out = []
    for c in report["contenders"]:
        for k, row in enumerate(c.get("rows", [])):
            drain = row["drain"]
            server = sum((drain.get("server_cpu_us") or {}).values())
            out.append(
                {
                    "key": c["key"],
                    "ours": c["key"] in OURS,
                    "first": k == 0,
                    "label": c["label"],
                    "setup": row["label"],
                    "storage": c["storage"],
                    "procs": drain["procs"],
                    "bulk": get(row, "bulk", "rate"),
                    "single": get(row, "single", "rate"),
                    "drain": drain["rate"],
                    "p50": get(row, "latency", "p50"),
                    "p99": get(row, "latency", "p99"),
                    "worker_cpu": drain["worker_cpu_us"],
                    "server_cpu": server,
                    "cpu": drain["worker_cpu_us"] + server,
                    "has_bulk": c["bulk_api"] is not None,
                    "load": [(a[0], b[0]) for a, b in c.get("loadavg", [])],
                    "others": c.get("others_cpu", []),
                    "rounds": row.get("rounds", []),
                    # Slower to drain than the latency run's arrival rate: a growing queue.
                    "saturated": get(row, "latency", "interval_ms") is not None
                    and drain["rate"] < 1000 / row["latency"]["interval_ms"],
                }
            )
    return out


def main_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    rows = []
    for e in entries(report):
        if e["first"]:
            bulk = rate(e["bulk"]) if e["has_bulk"] else "no bulk API"
            single = rate(e["single"])
        else:
            bulk = single = AS_ABOVE
        lat = "—" if e["p50"] is None else f"{e['p50']:.1f} / {e['p99']:.1f}"
        if e["saturated"]:
            lat += " †"
        name = f"**{e['label']}**" if e["ours"] else e["label"]
        rows.append(
            (
                name if e["first"] else "",
                e["setup"],
                bulk,
                single,
                rate(e["drain"]),
                lat,
                f"{e['worker_cpu']:,.0f} + {e['server_cpu']:,.0f}",
                machine_cells(e) if e["first"] else "",
            )
        )
    for c in report["contenders"]:
        if "error" in c:
            rows.append((c.get("label", c["key"]), "could not run", *["—"] * 5, c["error"][:80]))
    return rows


def machine_cells(e: dict[str, Any]) -> str:
    """Per round: load average at the start → end, and the other processes' CPU (cores)."""
    return " · ".join(
        f"{a:.1f}→{b:.1f} / {o:.2f}" for (a, b), o in zip(e["load"], e["others"], strict=True)
    )


def round_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    """Every round's own figures, to show how far apart the rounds were."""

    def each(values: list[float | None], f: Callable[[float], str]) -> str:
        return " · ".join("—" if v is None else f(v) for v in values)

    rows = []
    for e in entries(report):
        r = e["rounds"]
        rows.append(
            (
                e["label"],
                e["setup"],
                each([x["bulk"] for x in r], rate) if e["first"] else "",
                each([x["single"] for x in r], rate) if e["first"] else "",
                each([x["drain"] for x in r], rate),
                each([x["p50"] for x in r], lambda v: f"{v:.1f}"),
                each([x["cpu"] for x in r], rate),
            )
        )
    return rows


ROUND_HEADER = (
    "contender",
    "workers",
    "bulk enqueue/s",
    "single enqueue/s",
    "drain jobs/s",
    "p50 (ms)",
    "CPU µs/job",
)

HEADER = (
    "contender",
    "workers",
    "bulk enqueue/s",
    "single enqueue/s",
    "drain jobs/s",
    "p50 / p99 enqueue→start (ms)",
    "CPU µs/job: workers + servers",
    "per round: load avg start→end / others' CPU (cores)",
)

#: (label, entry field, higher is better, entries that compete).
METRICS: list[tuple[str, str, bool, Callable[[dict[str, Any]], bool]]] = [
    ("bulk enqueue (jobs/s)", "bulk", True, lambda e: e["first"] and e["bulk"] is not None),
    ("single enqueue (jobs/s)", "single", True, lambda e: e["first"]),
    ("drain, 2 worker processes (jobs/s)", "drain", True, lambda e: e["procs"] == 2),
    ("p50 enqueue→start, idle workers (ms)", "p50", False, lambda e: e["procs"] == 2),
    ("CPU per job, workers + servers (µs)", "cpu", False, lambda e: e["procs"] == 2),
]


def best(pool: list[dict[str, Any]], field: str, higher: bool) -> dict[str, Any] | None:
    pool = [e for e in pool if e[field] is not None]
    if not pool:
        return None
    return (max if higher else min)(pool, key=lambda e: e[field])


def fmt(field: str, v: float) -> str:
    return f"{v:.1f}" if field == "p50" else rate(v)


def who(e: dict[str, Any] | None, field: str) -> str:
    """A peer's figure and name, with its worker setup unless it is the contender's first."""
    if e is None:
        return "—"
    setup = "" if e["first"] else f", {e['setup'].split(' (')[0]}"
    return f"{fmt(field, e[field])} ({e['label']}{setup})"


def ratio_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    all_entries = entries(report)
    rows = []
    for label, field, higher, eligible in METRICS:
        peers = [e for e in all_entries if not e["ours"] and eligible(e)]
        top = best(peers, field, higher)
        by_storage = {
            s: best([e for e in peers if e["storage"] == s], field, higher)
            for s in ("PostgreSQL", "Redis")
        }

        cells = [
            label,
            "higher" if higher else "lower",
            who(top, field),
            who(by_storage["PostgreSQL"], field),
            who(by_storage["Redis"], field),
        ]
        for key in OURS:
            mine = next((e for e in all_entries if e["key"] == key and eligible(e)), None)
            if mine is None or mine[field] is None or top is None:
                cells.append("—")
                continue
            same = by_storage[mine["storage"]]
            text = f"{fmt(field, mine[field])}: {mine[field] / top[field]:.2f}× best"
            if same is not None and same is not top:
                text += f", {mine[field] / same[field]:.2f}× best on {mine['storage']}"
            cells.append(text)
        rows.append(tuple(cells))
    return rows


RATIO_HEADER = (
    "measurement",
    "better",
    "best peer",
    "best PostgreSQL peer",
    "best Redis peer",
    "django-blamequeue (PostgreSQL) ÷ peer",
    "django-blamequeue (Redis) ÷ peer",
)


# ------------------------------------------------------------------------ the ORM workload
#: The figure before slots kept their connections: 2 × runworker --concurrency 10,
#: CONN_MAX_AGE=0, ORM jobs.
ISSUE_ORM = 206.0


def orm_entries(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat entry per (contender, ORM worker setup), in run order."""
    out = []
    for c in report["contenders"]:
        for row in c.get("orm_rows", []):
            drain = row["drain"]
            server = sum((drain.get("server_cpu_us") or {}).values())
            out.append(
                {
                    "key": c["key"],
                    "variant": row["variant"],
                    "ours": c["key"] in OURS,
                    "label": c["label"],
                    "setup": row["label"],
                    "drain": drain["rate"],
                    "worker_cpu": drain["worker_cpu_us"],
                    "server_cpu": server,
                    "rounds": [x["drain"] for x in row.get("rounds", [])],
                }
            )
    return out


def orm_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    all_entries = orm_entries(report)
    peers = [e for e in all_entries if not e["ours"]]
    top = max(peers, key=lambda e: e["drain"]) if peers else None
    rows = []
    for e in all_entries:
        name = f"**{e['label']}**" if e["ours"] else e["label"]
        rows.append(
            (
                name,
                e["setup"],
                rate(e["drain"]),
                " · ".join(rate(r) for r in e["rounds"]),
                f"{e['drain'] / top['drain']:.2f}×" if top else "—",
                f"{e['drain'] / ISSUE_ORM:.2f}×",
                f"{e['worker_cpu']:,.0f} + {e['server_cpu']:,.0f}",
            )
        )
    return rows


ORM_HEADER = (
    "contender",
    "workers",
    "drain jobs/s (best)",
    "per round",
    "÷ best peer",
    "÷ 206/s",
    "CPU µs/job: workers + servers",
)


def issue_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    """The comparisons that this run can make: (comparison, ours, theirs, ratio, goal)."""
    noop = entries(report)
    orm = orm_entries(report)

    def find(pool: list[dict[str, Any]], key: str, setup_has: str) -> dict[str, Any] | None:
        return next((e for e in pool if e["key"] == key and setup_has in e["setup"]), None)

    rows = []
    ours = find(noop, "blamequeue-postgres", "default concurrency")
    theirs = find(noop, "procrastinate", "--concurrency 10`")
    if ours and theirs:
        rows.append(
            (
                "no-op drain: 2 default `runworker` ÷ Procrastinate `--concurrency=10`",
                rate(ours["drain"]),
                rate(theirs["drain"]),
                f"{ours['drain'] / theirs['drain']:.2f}×",
                "≥ 4×",
            )
        )
    peers = [e for e in orm if not e["ours"]]
    top = max(peers, key=lambda e: e["drain"]) if peers else None
    for e in (x for x in orm if x["ours"]):
        rows.append(
            (
                f"ORM drain: {e['setup']} ÷ 206/s (the figure before slots kept their connections)",
                rate(e["drain"]),
                "206",
                f"{e['drain'] / ISSUE_ORM:.2f}×",
                "≥ 3×",
            )
        )
        if top is not None:
            rows.append(
                (
                    f"ORM drain: {e['setup']} ÷ best peer ({top['label']}, "
                    f"{top['setup'].replace('`', '')})",
                    rate(e["drain"]),
                    rate(top["drain"]),
                    f"{e['drain'] / top['drain']:.2f}×",
                    "",
                )
            )
    return rows


ISSUE_HEADER = ("comparison (same run)", "django-blamequeue", "peer", "ratio", "goal")


def markdown_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def text_table(report: dict[str, Any]) -> str:
    def plain(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
        rows = [tuple(c.replace("**", "").replace("`", "") for c in r) for r in rows]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))  # noqa: E731
        return "\n".join([fmt(header), "  ".join("-" * w for w in widths), *map(fmt, rows)])

    parts = [
        plain(main_rows(report), HEADER),
        plain(round_rows(report), ROUND_HEADER),
        plain(ratio_rows(report), RATIO_HEADER),
    ]
    if orm_entries(report):
        parts.append(plain(orm_rows(report), ORM_HEADER))
    if issue_rows(report):
        parts.append(plain(issue_rows(report), ISSUE_HEADER))
    return "\n\n".join(parts)


def method_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    rows = []
    for c in report["contenders"]:
        if "error" in c:
            continue
        versions = ", ".join(f"{k} {v}" for k, v in c["versions"].items())
        rows.append(
            (
                c["label"],
                c["single_api"],
                c["bulk_api"] or "none",
                c["drain_method"],
                c["latency_method"],
                c.get("orm_method") or "—",
                versions,
            )
        )
    return rows


def generated_section(report: dict[str, Any]) -> str:
    m, cfg, s = report["machine"], report["config"], report.get("servers", {})
    pg, rd = s.get("postgres", {}), s.get("redis", {})
    lines = [
        BEGIN,
        f"<!-- written by bench/peers.py on {report['finished']}; edit outside the markers -->",
        "",
        f"Run of {report['finished']} (`{report['command']}`, {report['elapsed_s']:.0f} s).",
        "",
        f"- Machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB memory, Linux "
        f"{m['kernel']}, shared with other engineers' test runs: the load on it while each "
        "contender ran is in the table.",
        f"- PostgreSQL {pg.get('server_version', '?')} (fsync={pg.get('fsync', '?')}, "
        f"synchronous_commit={pg.get('synchronous_commit', '?')}, "
        f"shared_buffers={pg.get('shared_buffers', '?')}) and Redis {rd.get('version', '?')} "
        f"(appendonly={rd.get('appendonly', '?')}, appendfsync={rd.get('appendfsync', '?')}), "
        "both started by `tests.servers` on 127.0.0.1 for this run; one database (PostgreSQL) "
        "or database number (Redis) per contender.",
        f"- Peers' virtualenv (`.tmp/bench-peers/venv`, Python {m['python']}): "
        + ", ".join(f"`{p}`" for p in report["pins"])
        + ".",
        f"- Workload: N = {cfg['n']:,} no-op jobs; bulk calls of {cfg['batch']:,}; single "
        f"enqueues from one thread; drains by the row's worker processes ({cfg['concurrency']} "
        f"slots each where the library has slots); latency: {cfg['latency_jobs']} jobs one "
        f"every {cfg['latency_interval'] * 1000:g} ms to the same worker processes, idle.",
        "",
        f"Best of {cfg.get('rounds', 1)} round(s) per measurement (the order of the "
        "contenders reversed every other round); every round's figures are in the second "
        "table. Last column, per round: the load average when the contender started → ended, "
        "and the CPU the machine's *other* processes used meanwhile, in cores (the busy time "
        "of every CPU less this benchmark's own processes and servers, over the wall time).",
        "",
        markdown_table(HEADER, main_rows(report)),
        "",
        *[
            f"- {c.get('label', c['key'])}: a round failed and is left out: {err}"
            for c in report["contenders"]
            for err in c.get("errors", [])
        ],
        *(
            [
                f"† This setup drains fewer than the {1 / cfg['latency_interval']:g} jobs/s "
                "the latency run enqueues: the queue grows during that run, and the figure "
                "measures the wait behind it rather than an idle worker's wake-up.",
                "",
            ]
            if any(e["saturated"] for e in entries(report))
            else []
        ),
        "Each contender's figures against the best peer's (a ratio above 1 is better for "
        "throughput, below 1 for latency and CPU; drain, latency and CPU compare 2-process setups "
        "only):",
        "",
        markdown_table(RATIO_HEADER, ratio_rows(report)),
        "",
        "Each round's own figures (round 1 · round 2 …):",
        "",
        markdown_table(ROUND_HEADER, round_rows(report)),
        "",
        *orm_section(report),
        *(
            [
                "The comparisons, from this run:",
                "",
                markdown_table(ISSUE_HEADER, issue_rows(report)),
                "",
            ]
            if issue_rows(report)
            else []
        ),
        "How each figure was taken:",
        "",
        markdown_table(
            ("contender", "single", "bulk", "drain window", "latency", "ORM job", "versions"),
            method_rows(report),
        ),
        "",
        "![Peers side by side](img/peers.png)",
        "",
        END,
    ]
    return "\n".join(lines)


def orm_section(report: dict[str, Any]) -> list[str]:
    if not orm_entries(report):
        return []
    cfg = report["config"]
    return [
        f"**ORM workload**: N = {cfg.get('orm_n', 0):,} jobs that each read one row and write "
        "one row through the Django ORM (`bench/ormapp`: `Account` by primary key, one `Entry` "
        "inserted, autocommit), Django's default `CONN_MAX_AGE=0` everywhere, enqueued in bulk "
        "and drained by the row's worker processes "
        f"({cfg.get('orm_concurrency', 10)} slots, threads or processes each), timed as the "
        "no-op drain; every `Entry` is checked. How each library runs the job is in the last "
        "table.",
        "",
        markdown_table(ORM_HEADER, orm_rows(report)),
        "",
    ]


SKELETON = """# Benchmarks: peers

`bench/peers.py` runs django-blamequeue and its peers one after the other on this machine.

{generated}
"""


def write_doc(report: dict[str, Any]) -> None:
    section = generated_section(report)
    if DOC.exists() and BEGIN in (text := DOC.read_text()) and END in text:
        head, rest = text.split(BEGIN, 1)
        DOC.write_text(head + section + rest.split(END, 1)[1])
    else:
        DOC.write_text(SKELETON.format(generated=section))


PANELS = [
    ("bulk enqueue (jobs/s)", "bulk", True),
    ("single enqueue (jobs/s)", "single", True),
    ("drain (jobs/s)", "drain", True),
    ("p50 enqueue→start (ms)", "p50", False),
    ("CPU per job, workers + servers (µs)", "cpu", False),
]
COLORS = {"ours": "#2f5d8a", "PostgreSQL": "#9bbbd9", "Redis": "#e3a76f"}


def write_plot(report: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import NullFormatter

    all_entries = entries(report)
    names = [f"{e['label']}\n{e['setup'].replace('`', '').split(' (')[0]}" for e in all_entries]
    fig, axes = plt.subplots(1, len(PANELS), figsize=(18, 0.55 * len(names) + 2), sharey=True)
    ys = list(range(len(names)))[::-1]
    for ax, (title, field, higher) in zip(axes, PANELS, strict=True):
        for y, e in zip(ys, all_entries, strict=True):
            v = e[field]
            if v is None:
                continue
            color = COLORS["ours"] if e["ours"] else COLORS[e["storage"]]
            ax.barh(y, v, color=color)
            text = f"{v:.1f}" if field == "p50" else f"{v:,.0f}"
            ax.text(v, y, " " + text, va="center", fontsize=7)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(title + ("" if higher else "\nlower is better"), fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
        ax.margins(x=0.35)
    axes[0].set_yticks(ys, names, fontsize=7)
    fig.legend(
        handles=[
            Patch(color=COLORS["ours"], label="django-blamequeue"),
            Patch(color=COLORS["PostgreSQL"], label="peer on PostgreSQL"),
            Patch(color=COLORS["Redis"], label="peer on Redis"),
        ],
        loc="lower center",
        ncol=3,
        fontsize=8,
    )
    m = report["machine"]
    fig.suptitle(
        f"No-op jobs, N = {report['config']['n']:,}, one run on {m['nproc']} shared CPUs · "
        f"{report['finished']} · best of {report['config'].get('rounds', 1)} round(s) "
        "(log scales)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=100)
    plt.close(fig)
