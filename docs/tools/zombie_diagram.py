"""Draw docs/img/zombie.svg: a worker that stalls past its lease ("a zombie"), and why with
``@job(atomic=True)`` its writes never land (docs/effects.md).

A sequence diagram, laid out by hand from the ``STEPS`` below (no layout tool, no network);
the output is byte-for-byte reproducible: ``tests/docs/test_site.py`` regenerates it and
compares.

    .venv/bin/python docs/tools/zombie_diagram.py           # rewrite the SVG
    .venv/bin/python docs/tools/zombie_diagram.py --check   # exit 1 if it is stale
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from html import escape
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "docs" / "img" / "zombie.svg"
TOP = 70  # the lanes' titles
ROW = 44  # vertical space per step
WIDTH = 980

#: The lanes, left to right: (key, title, x).
LANES = (
    ("a", "worker A (the zombie)", 140),
    ("db", "the job's database", 430),
    ("s", "sweeper", 660),
    ("b", "worker B", 860),
)
X = {key: x for key, _, x in LANES}


@dataclass(frozen=True)
class Step:
    src: str
    dst: str  # == src: a note on the lane itself
    text: str
    kind: str = "call"  # call | note | refused | commit | stall


STEPS: tuple[Step, ...] = (
    Step("a", "db", "claim: inflight, lease token a"),
    Step("a", "db", "BEGIN; the handler writes (not committed)"),
    Step("a", "a", "stalls: GC pause, SIGSTOP, a stuck call…", "stall"),
    Step("a", "a", "…the lease expires meanwhile", "stall"),
    Step("s", "db", "rescue: lease expired → pending"),
    Step("b", "db", "claim: inflight, lease token b"),
    Step("b", "db", "BEGIN; the handler writes"),
    Step("b", "db", "UPDATE … SET done WHERE token = b: 1 row"),
    Step("b", "db", "COMMIT: B's writes + done, together", "commit"),
    Step("a", "a", "resumes", "note"),
    Step("a", "db", "UPDATE … SET done WHERE token = a: 0 rows", "refused"),
    Step("a", "db", "ROLLBACK: A's writes vanish · LOCK_LOST", "refused"),
)

COLOURS = {
    "call": "#374151",
    "note": "#374151",
    "stall": "#b45309",
    "refused": "#b91c1c",
    "commit": "#15803d",
}


def _text(x: float, y: float, text: str, cls: str, anchor: str = "middle") -> str:
    return f'<text class="{cls}" x="{x:g}" y="{y:g}" text-anchor="{anchor}">{escape(text)}</text>'


def _step(i: int, step: Step) -> list[str]:
    y = TOP + 60 + i * ROW
    colour = COLOURS[step.kind]
    x1, x2 = X[step.src], X[step.dst]
    if step.src == step.dst:
        out = [
            f'<rect x="{x1 - 6:g}" y="{y - 16:g}" width="12" height="24" fill="{colour}" '
            'opacity="0.25"/>'
        ]
        return [*out, _text(x1 + 14, y, step.text, f"note {step.kind}", "start")]
    line = (
        f'<path class="msg" d="M {x1:g} {y:g} L {x2 - (8 if x2 > x1 else -8):g} {y:g}" '
        f'stroke="{colour}" marker-end="url(#arrow-{step.kind})"/>'
    )
    middle = (x1 + x2) / 2
    return [line, _text(middle, y - 7, step.text, f"label {step.kind}")]


NOTES = (
    "With @job(atomic=True) the handler's writes and the fenced completion are one transaction:",
    "only the run that still holds the lease can commit them. Worker B's writes land once; A's "
    "never do.",
    "Without it, A's writes were committed as it made them, before it stalled: B writes again, "
    "two sets land.",
    "On redis the completion is a mark row in the same transaction (the first run to commit "
    "wins): docs/effects.md.",
)
BOTTOM = TOP + 40 + len(STEPS) * ROW
HEIGHT = BOTTOM + 40 + len(NOTES) * 18 + 10


def render() -> str:
    bottom = BOTTOM
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="title desc">',
        '<title id="title">A zombie worker and an atomic job</title>',
        '<desc id="desc">Worker A stalls past its lease with uncommitted writes; the sweeper '
        "re-pends the job; worker B takes it over and commits its writes with the fenced "
        "completion; A resumes, its fenced update matches no row, and its transaction rolls "
        "back.</desc>",
        "<style>"
        "text{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif}"
        ".lane{font-size:15px;font-weight:600;fill:#111827}"
        ".label{font-size:12.5px;fill:#1f2937;stroke:#ffffff;stroke-width:4px;"
        "stroke-linejoin:round;paint-order:stroke}"
        ".note{font-size:12.5px;fill:#1f2937}"
        ".refused{fill:#b91c1c}.commit{fill:#15803d}.stall{fill:#b45309}"
        ".foot{font-size:12px;fill:#4b5563}"
        ".msg{fill:none;stroke-width:1.6}"
        ".life{stroke:#9ca3af;stroke-width:1.2;stroke-dasharray:4 4}"
        "</style>",
        "<defs>"
        + "".join(
            f'<marker id="arrow-{kind}" viewBox="0 0 10 10" refX="9.5" refY="5" '
            f'markerWidth="8" markerHeight="8" orient="auto-start-reverse">'
            f'<path d="M 0 0 L 10 5 L 0 10 z" fill="{colour}"/></marker>'
            for kind, colour in COLOURS.items()
        )
        + "</defs>",
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
    ]
    for _key, title, x in LANES:
        out.append(
            f'<rect x="{x - 88:g}" y="{TOP - 24:g}" width="176" height="36" rx="8" '
            'fill="#f3f4f6" stroke="#6b7280"/>'
        )
        out.append(_text(x, TOP, title, "lane"))
        out.append(f'<path class="life" d="M {x:g} {TOP + 12:g} L {x:g} {bottom:g}"/>')
    for i, step in enumerate(STEPS):
        out += _step(i, step)
    for j, line in enumerate(NOTES):
        out.append(_text(40, bottom + 40 + j * 18, line, "foot", "start"))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    svg = render()
    if "--check" in argv:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != svg:
            print(f"{OUTPUT.relative_to(ROOT)} is stale: run docs/tools/zombie_diagram.py")
            return 1
        return 0
    OUTPUT.write_text(svg, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
