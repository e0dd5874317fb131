"""Draw docs/img/lifecycle.svg: the job lifecycle as a picture.

The arrows are checked against ``django_blamequeue.core.states.ALLOWED`` (as data)
before anything is written, so the picture cannot show a transition the code does not allow,
nor miss one. The layout is fixed by hand below (no graph-layout tool, no network), and the
output is byte-for-byte reproducible: ``tests/docs/test_site.py`` regenerates it and compares.

    .venv/bin/python docs/tools/lifecycle_diagram.py           # rewrite the SVG
    .venv/bin/python docs/tools/lifecycle_diagram.py --check   # exit 1 if it is stale
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from html import escape
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from django_blamequeue.core.states import ALLOWED, TERMINAL, State  # noqa: E402

OUTPUT = ROOT / "docs" / "img" / "lifecycle.svg"
START = "enqueue"  # the initial pseudo-state: not a state of the job
WIDTH, HEIGHT = 980, 640


@dataclass(frozen=True)
class Node:
    x: float  # centre
    y: float
    w: float = 150
    h: float = 46
    title: str = ""


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    points: tuple[tuple[float, float], ...]  # 2: a line; 4: a cubic Bézier
    label: tuple[str, ...]
    at: tuple[float, float]  # the label's first baseline
    anchor: str = "middle"


NODES: dict[str, Node] = {
    State.PENDING: Node(280, 250, title="pending"),
    State.BLOCKED: Node(280, 470, title="blocked"),
    State.INFLIGHT: Node(580, 250, title="inflight"),
    State.WAITING_CHILDREN: Node(580, 470, w=176, title="waiting_children"),
    State.DONE: Node(880, 250, title="done"),
    State.FAILED: Node(880, 90, title="failed (the DLQ)", w=160),
    State.CANCELLED: Node(430, 580, title="cancelled"),
}
START_AT = (60.0, 250.0)

EDGES: tuple[Edge, ...] = (
    Edge(START, State.PENDING, ((70, 250), (205, 250)), ("enqueue",), (137, 240)),
    Edge(
        START,
        State.BLOCKED,
        ((66, 258), (95, 420), (140, 470), (205, 470)),
        ("enqueue_flow child", "with depends_on"),
        (100, 500),
    ),
    Edge(
        State.BLOCKED,
        State.PENDING,
        ((260, 447), (260, 273)),
        ("every dependency", "done"),
        (252, 355),
        "end",
    ),
    Edge(State.BLOCKED, State.CANCELLED, ((300, 493), (372, 557)), ("cancel",), (318, 545), "end"),
    Edge(
        State.PENDING,
        State.INFLIGHT,
        ((355, 250), (505, 250)),
        ("lease", "(attempts + 1)"),
        (430, 272),
    ),
    Edge(
        State.PENDING, State.CANCELLED, ((300, 273), (395, 557)), ("cancel",), (352, 420), "start"
    ),
    Edge(State.INFLIGHT, State.DONE, ((655, 250), (805, 250)), ("ok",), (730, 242)),
    Edge(
        State.INFLIGHT,
        State.PENDING,
        ((540, 227), (515, 165), (375, 165), (320, 227)),
        ("retry after backoff · graceful release", "· expired lease rescued"),
        (445, 150),
    ),
    Edge(
        State.INFLIGHT,
        State.FAILED,
        ((625, 227), (830, 113)),
        (
            "attempts exhausted",
            "· unrecoverable · not retryable",
            "· bad job · stalled too often",
        ),
        (772, 168),
        "start",
    ),
    Edge(
        State.INFLIGHT,
        State.CANCELLED,
        ((640, 273), (720, 400), (690, 580), (505, 580)),
        ("cancel",),
        (668, 508),
        "start",
    ),
    Edge(
        State.INFLIGHT,
        State.WAITING_CHILDREN,
        ((580, 273), (580, 447)),
        ("fan_out",),
        (588, 365),
        "start",
    ),
    Edge(
        State.WAITING_CHILDREN,
        State.PENDING,
        ((505, 455), (345, 273)),
        ("children settled", "(collect runs)"),
        (408, 330),
        "start",
    ),
    Edge(
        State.WAITING_CHILDREN,
        State.CANCELLED,
        ((560, 493), (485, 557)),
        ("cancel",),
        (530, 540),
        "start",
    ),
    Edge(
        State.FAILED,
        State.PENDING,
        ((800, 80), (560, 20), (300, 40), (285, 227)),
        ("dlq_retry",),
        (520, 44),
    ),
)

FILL = {
    State.PENDING: ("#dbeafe", "#2563eb"),
    State.BLOCKED: ("#dbeafe", "#2563eb"),
    State.INFLIGHT: ("#fef3c7", "#b45309"),
    State.WAITING_CHILDREN: ("#fef3c7", "#b45309"),
    State.DONE: ("#dcfce7", "#15803d"),
    State.FAILED: ("#fee2e2", "#b91c1c"),
    State.CANCELLED: ("#e5e7eb", "#4b5563"),
}


def drawn() -> set[tuple[str, str]]:
    """The transitions between states that the picture shows (the enqueue arrows left out)."""
    return {(str(e.src), str(e.dst)) for e in EDGES if e.src != START}


def allowed() -> set[tuple[str, str]]:
    return {(str(src), str(dst)) for src, dsts in ALLOWED.items() for dst in dsts}


def mismatch() -> list[str]:
    """Why the picture disagrees with core.states.ALLOWED; empty when it matches exactly."""
    problems = [f"missing {a} → {b}" for a, b in sorted(allowed() - drawn())]
    problems += [f"not allowed {a} → {b}" for a, b in sorted(drawn() - allowed())]
    if {n for n in NODES} != set(State):
        problems.append("the boxes are not the states of core.states.State")
    if {str(e.dst) for e in EDGES if e.src == START} != {State.PENDING, State.BLOCKED}:
        problems.append("enqueue must lead to pending and blocked")
    return problems


def _path(points: tuple[tuple[float, float], ...]) -> str:
    coords = [f"{x:g} {y:g}" for x, y in points]
    if len(points) == 2:
        return f"M {coords[0]} L {coords[1]}"
    return f"M {coords[0]} C {coords[1]}, {coords[2]}, {coords[3]}"


def _text(lines: tuple[str, ...], x: float, y: float, anchor: str, cls: str) -> str:
    spans = "".join(
        f'<tspan x="{x:g}" dy="{0 if i == 0 else 15}">{escape(line)}</tspan>'
        for i, line in enumerate(lines)
    )
    return f'<text class="{cls}" x="{x:g}" y="{y:g}" text-anchor="{anchor}">{spans}</text>'


def render() -> str:
    problems = mismatch()
    if problems:
        raise SystemExit(
            "lifecycle diagram disagrees with core.states.ALLOWED: " + "; ".join(problems)
        )
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="title desc">',
        '<title id="title">The job lifecycle</title>',
        '<desc id="desc">States and transitions of a django-blamequeue job, drawn from '
        "django_blamequeue.core.states.ALLOWED.</desc>",
        "<style>"
        "text{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif}"
        ".state{font-size:15px;font-weight:600;fill:#111827}"
        ".label{font-size:12.5px;fill:#1f2937;stroke:#ffffff;stroke-width:4px;"
        "stroke-linejoin:round;paint-order:stroke}"
        ".note{font-size:11.5px;fill:#6b7280}"
        ".edge{fill:none;stroke:#374151;stroke-width:1.6}"
        "</style>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9.5" refY="5" markerWidth="8" '
        'markerHeight="8" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'fill="#374151"/></marker></defs>',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
    ]
    for edge in EDGES:
        out.append(
            f'<path class="edge" data-from="{edge.src}" data-to="{edge.dst}" '
            f'd="{_path(edge.points)}" marker-end="url(#arrow)"/>'
        )
    x0, y0 = START_AT
    out.append(f'<circle cx="{x0:g}" cy="{y0:g}" r="9" fill="#111827" data-state="{START}"/>')
    for name, node in NODES.items():
        fill, stroke = FILL[State(name)]
        width = 3 if name in TERMINAL else 1.6
        out.append(
            f'<rect data-state="{name}" x="{node.x - node.w / 2:g}" y="{node.y - node.h / 2:g}" '
            f'width="{node.w:g}" height="{node.h:g}" rx="10" fill="{fill}" stroke="{stroke}" '
            f'stroke-width="{width:g}"/>'
        )
        out.append(_text((node.title,), node.x, node.y + 5, "middle", "state"))
    for edge in EDGES:
        out.append(_text(edge.label, *edge.at, edge.anchor, "label"))
    out.append(
        _text(
            (
                "Thick border: a terminal state;",
                "only failed leaves it (dlq_retry).",
                "pending includes delayed jobs.",
                "Drawn from core.states.ALLOWED",
                "by docs/tools/lifecycle_diagram.py.",
            ),
            735,
            545,
            "start",
            "note",
        )
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    svg = render()
    if "--check" in argv:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != svg:
            print(f"{OUTPUT.relative_to(ROOT)} is stale: run docs/tools/lifecycle_diagram.py")
            return 1
        return 0
    OUTPUT.write_text(svg, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
