"""A flow's graph, laid out and drawn as SVG on the server (no script, nothing fetched).

Pure functions over ``JobInfo`` records. Edges come from DAG dependencies (``depends_on``,
drawn solid) and from parent/child links (``parent_id``, drawn dashed), so a DAG, a fan-out
tree or a mix lay out the same way: columns by longest path from the roots, rows ordered by
the average row of their predecessors. A column with more than ``MAX_PER_COLUMN`` jobs is
drawn as groups (one box per job name — or one for the column if the names are all
different — with the state mix as a bar) whose members are listed
page by page below the graph — 10,000 children stay one readable box. A graph deeper than
``MAX_COLUMNS`` keeps its first and last ``EDGE_COLUMNS`` columns and folds the ones between
into spans of consecutive columns, one group each ("steps 4–628") — a 10,000-step chain is 20
boxes wide, not 2.7 million pixels.

Every label, id and URL is escaped by ``format_html``; nothing from a payload is drawn.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from django_blamequeue.admin.display import STATES, style_of
from django_blamequeue.core.records import JobInfo

MAX_PER_COLUMN = 40
#: The most columns a graph draws; deeper graphs fold their middle columns into spans.
MAX_COLUMNS = 20
#: Columns kept as they are at each end of a folded graph.
EDGE_COLUMNS = 3
#: A grouped column shows at most this many groups (one per job name), else one group.
MAX_GROUPS = 8
NODE_W, NODE_H = 200, 46
GAP_X, GAP_Y, PAD = 70, 14, 16
LABEL_CHARS = 24

DEP, CHILD = "depends_on", "child"


@dataclass(slots=True)
class Node:
    """One job, or a group of jobs of one column sharing a name."""

    key: str  # job id, or "group:<n>"
    label: str
    state: str  # a job's state; for a group the most urgent state among its members
    url: str | None
    members: list[JobInfo] = field(default_factory=list)  # groups only
    counts: Counter[str] = field(default_factory=Counter)  # groups only
    x: float = 0.0
    y: float = 0.0

    @property
    def is_group(self) -> bool:
        return bool(self.members)


@dataclass(frozen=True, slots=True)
class Edge:
    src: str
    dst: str
    kind: str


@dataclass(slots=True)
class Graph:
    nodes: list[Node]
    edges: list[Edge]
    width: int
    height: int

    def groups(self) -> list[Node]:
        return [n for n in self.nodes if n.is_group]


#: A group shows the state that most needs an operator's eye.
URGENCY = ["failed", "inflight", "waiting_children", "pending", "blocked", "cancelled", "done"]


def job_label(job: JobInfo) -> str:
    return job.flow_key or job.name


def edges_of(jobs: Sequence[JobInfo]) -> list[Edge]:
    ids = {j.job_id for j in jobs}
    edges = [Edge(d, j.job_id, DEP) for j in jobs for d in j.depends_on if d in ids]
    edges += [Edge(j.parent_id, j.job_id, CHILD) for j in jobs if j.parent_id in ids]
    return edges


def columns(ids: Sequence[str], edges: Sequence[Edge]) -> dict[str, int]:
    """Longest path from a root (Kahn's order); anything left in a cycle goes to column 0."""
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    for e in edges:
        preds[e.dst].append(e.src)
        succs[e.src].append(e.dst)
    indegree = {i: len(preds[i]) for i in ids}
    column = dict.fromkeys(ids, 0)
    ready = [i for i in ids if indegree[i] == 0]
    while ready:
        nxt: list[str] = []
        for i in ready:
            for s in succs[i]:
                column[s] = max(column[s], column[i] + 1)
                indegree[s] -= 1
                if indegree[s] == 0:
                    nxt.append(s)
        ready = nxt
    return column


def build(
    jobs: Sequence[JobInfo], url_for: Callable[[str], str], group_url: Callable[[int], str]
) -> Graph:
    """Nodes, edges and positions for ``jobs`` (one flow)."""
    ordered = sorted(jobs, key=lambda j: j.job_id)
    edges = edges_of(ordered)
    column = columns([j.job_id for j in ordered], edges)
    by_column: dict[int, list[JobInfo]] = defaultdict(list)
    for j in ordered:
        by_column[column[j.job_id]].append(j)

    owner: dict[str, str] = {}  # job id -> node key
    layout: list[list[Node]] = []
    groups = 0
    for first, last in spans(max(by_column, default=-1) + 1):
        members = [j for c in range(first, last + 1) for j in by_column[c]]
        col = _column(first, last, members, groups, url_for, group_url)
        for node in col:
            if node.is_group:
                owner.update((j.job_id, node.key) for j in node.members)
            else:  # a single job's node is keyed by its id
                owner[node.key] = node.key
        groups += sum(1 for node in col if node.is_group)
        layout.append(col)

    between = {
        Edge(owner[e.src], owner[e.dst], e.kind) for e in edges if owner[e.src] != owner[e.dst]
    }
    merged = sorted(between, key=lambda e: (e.src, e.dst, e.kind))
    _order(layout, merged)
    tallest = max((len(col) for col in layout), default=0)
    height = PAD * 2 + tallest * (NODE_H + GAP_Y) - (GAP_Y if tallest else 0)
    for c, col in enumerate(layout):
        offset = (tallest - len(col)) * (NODE_H + GAP_Y) / 2
        for r, node in enumerate(col):
            node.x = PAD + c * (NODE_W + GAP_X)
            node.y = PAD + offset + r * (NODE_H + GAP_Y)
    width = PAD * 2 + len(layout) * (NODE_W + GAP_X) - (GAP_X if layout else 0)
    return Graph([n for col in layout for n in col], merged, int(width), int(height))


def _column(
    first: int,
    last: int,
    members: list[JobInfo],
    groups: int,
    url_for: Callable[[str], str],
    group_url: Callable[[int], str],
) -> list[Node]:
    """The nodes of one drawn column (columns ``first``–``last``); groups are numbered from
    ``groups`` on."""
    if first != last:  # a folded stretch of a deep graph: one group
        label = f"steps {first + 1:,}–{last + 1:,} ×{len(members):,}"
        return [_group(groups, label, members, group_url)]
    if len(members) <= MAX_PER_COLUMN:
        return [Node(j.job_id, job_label(j), j.state, url_for(j.job_id)) for j in members]
    by_name: dict[str, list[JobInfo]] = defaultdict(list)
    for j in members:
        by_name[j.name].append(j)
    if len(by_name) > MAX_GROUPS:  # every node named apart: one group for the column
        by_name = {"": members}
    return [
        _group(groups + i, f"{name.rsplit('.', 1)[-1] or 'jobs'} ×{len(group):,}", group, group_url)
        for i, (name, group) in enumerate(sorted(by_name.items()))
    ]


def _group(n: int, label: str, members: list[JobInfo], group_url: Callable[[int], str]) -> Node:
    counts = Counter(j.state for j in members)
    state = next((s for s in URGENCY if counts.get(s)), members[0].state)
    return Node(f"group:{n}", label, state, group_url(n), members=members, counts=counts)


def spans(count: int) -> list[tuple[int, int]]:
    """The columns drawn, as (first, last) column numbers: one each up to ``MAX_COLUMNS``;
    past it the first and last ``EDGE_COLUMNS`` alone and the rest in stretches whose sizes
    differ by one at most."""
    if count <= MAX_COLUMNS:
        return [(c, c) for c in range(count)]
    start, end = EDGE_COLUMNS, count - EDGE_COLUMNS  # the folded columns: [start, end)
    slots = MAX_COLUMNS - 2 * EDGE_COLUMNS
    cuts = [start + i * (end - start) // slots for i in range(slots + 1)]
    middle = [(a, b - 1) for a, b in pairwise(cuts)]
    return [(c, c) for c in range(start)] + middle + [(c, c) for c in range(end, count)]


def _order(layout: list[list[Node]], edges: Sequence[Edge]) -> None:
    """Order each column by the mean row of its predecessors (fewer crossings)."""
    preds: dict[str, list[str]] = defaultdict(list)
    for e in edges:
        preds[e.dst].append(e.src)
    row: dict[str, int] = {}
    for col in layout:

        def weight(n: Node) -> float:
            rows = [row[p] for p in preds[n.key] if p in row]
            return sum(rows) / len(rows) if rows else -1.0

        col.sort(key=weight)  # stable: ties keep id order
        for r, node in enumerate(col):
            row[node.key] = r


# -- drawing ---------------------------------------------------------------------------------
def _n(value: float) -> str:
    return f"{value:.1f}"


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def _edge(e: Edge, nodes: dict[str, Node]) -> SafeString:
    a, b = nodes[e.src], nodes[e.dst]
    x1, y1 = a.x + NODE_W, a.y + NODE_H / 2
    x2, y2 = b.x, b.y + NODE_H / 2
    mid = (x1 + x2) / 2
    return format_html(
        '<path class="bq-edge bq-edge-{}" d="M{},{} C{},{} {},{} '
        '{},{}" marker-end="url(#bq-arrow)"{}/>',
        "child" if e.kind == CHILD else "dep",
        *(_n(v) for v in (x1, y1, mid, y1, mid, y2, x2 - 2, y2)),
        mark_safe(' stroke-dasharray="5 4"') if e.kind == CHILD else "",
    )


def _bar(node: Node) -> SafeString:
    total = sum(node.counts.values()) or 1
    x, parts = 8.0, []
    width = NODE_W - 16
    for s in STATES:
        n = node.counts.get(s, 0)
        if not n:
            continue
        w = width * n / total
        parts.append(
            format_html(
                '<rect x="{}" y="{}" width="{}" height="7" fill="{}"><title>{} {}</title></rect>',
                _n(x),
                NODE_H - 11,
                _n(w),
                style_of(s).fill,
                f"{n:,}",
                s,
            )
        )
        x += w
    return format_html_join("", "{}", ((p,) for p in parts))


def _short_summary(node: Node) -> str:
    """The two largest shares, e.g. ``7,200 done · 300 failed``."""
    top = sorted(node.counts.items(), key=lambda kv: -kv[1])[:2]
    return " · ".join(f"{n:,} {s.replace('_', ' ')}" for s, n in top)


def _node(node: Node) -> SafeString:
    st = style_of(node.state)
    if node.is_group:
        summary = " · ".join(f"{node.counts[s]:,} {s}" for s in STATES if node.counts.get(s))
        body = format_html(
            '<rect width="{}" height="{}" rx="6" fill="#ffffff" stroke="{}" stroke-width="2"/>'
            '<text x="8" y="16" class="bq-node-label" fill="#1f2328">{}</text>'
            '<text x="8" y="29" class="bq-node-state" fill="#1f2328">{}</text>{}',
            NODE_W,
            NODE_H,
            st.fill,
            _short(node.label),
            _short_summary(node),
            _bar(node),
        )
        title = f"{node.label}: {summary}"
        attrs = format_html('data-group="{}" data-state="{}"', node.key, node.state)
    else:
        body = format_html(
            '<rect width="{}" height="{}" rx="6" fill="{}" stroke="#00000033"/>'
            '<text x="10" y="19" class="bq-node-label" fill="{}">{} {}</text>'
            '<text x="10" y="36" class="bq-node-state" fill="{}">{}</text>',
            NODE_W,
            NODE_H,
            st.fill,
            st.ink,
            st.mark,
            _short(node.label),
            st.ink,
            node.state.replace("_", " "),
        )
        title = f"{node.label} — {node.state} ({node.key})"
        attrs = format_html('data-job-id="{}" data-state="{}"', node.key, node.state)
    inner = format_html(
        '<g class="bq-node" {} transform="translate({},{})"><title>{}</title>{}</g>',
        attrs,
        _n(node.x),
        _n(node.y),
        title,
        body,
    )
    if node.url is None:
        return inner
    return format_html('<a href="{}">{}</a>', node.url, inner)


def svg(graph: Graph) -> SafeString:
    nodes = {n.key: n for n in graph.nodes}
    edges = format_html_join("", "{}", ((_edge(e, nodes),) for e in graph.edges))
    body = format_html_join("", "{}", ((_node(n),) for n in graph.nodes))
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" class="bq-graph" width="{}" height="{}" '
        'viewBox="0 0 {} {}" role="img" aria-label="flow graph">'
        '<defs><marker id="bq-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#6e7076"/></marker></defs>'
        '<g class="bq-edges">{}</g><g class="bq-nodes">{}</g></svg>',
        graph.width,
        graph.height,
        graph.width,
        graph.height,
        edges,
        body,
    )


GRID_CELL, GRID_COLS = 18, 40


def member_grid(jobs: Sequence[JobInfo], url_for: Callable[[str], str]) -> SafeString:
    """One small square per job (a page of a group), coloured by state, each a link."""
    cells = []
    for i, j in enumerate(jobs):
        x, y = (i % GRID_COLS) * GRID_CELL, (i // GRID_COLS) * GRID_CELL
        cells.append(
            format_html(
                '<a href="{}"><rect class="bq-cell" data-job-id="{}" data-state="{}" x="{}" y="{}" '
                'width="{}" height="{}" rx="2" fill="{}"><title>{} — {} ({})</title></rect></a>',
                url_for(j.job_id),
                j.job_id,
                j.state,
                x,
                y,
                GRID_CELL - 3,
                GRID_CELL - 3,
                style_of(j.state).fill,
                job_label(j),
                j.state,
                j.job_id,
            )
        )
    rows = -(-len(jobs) // GRID_COLS)
    w, h = GRID_COLS * GRID_CELL, max(rows, 1) * GRID_CELL
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" class="bq-grid" width="{}" height="{}" '
        'viewBox="0 0 {} {}" role="img" aria-label="jobs of the group">{}</svg>',
        w,
        h,
        w,
        h,
        format_html_join("", "{}", ((c,) for c in cells)),
    )
