"""The fenced code blocks of a Markdown page, and the ``docs-test`` directives about them.

A directive is an HTML comment on the line before a fence (Markdown renders nothing for it):

- ``<!-- docs-test: skip (why) -->``: the block is not run; the reason is required.
- ``<!-- docs-test: continue -->``: a python block runs in the namespace of the page's
  previous python block (a fragment that goes on from it).
- ``<!-- docs-test: run -->``: a console block whose ``$ python manage.py …`` lines are run
  (through ``call_command``; their output is not compared).
- ``<!-- docs-test: output -->``: a text block that must equal what the previous python block
  printed (job ids, which differ per run, compare equal).

A block whose first line is a comment naming a file (``# shop/jobs.py``, ``# conftest.py``) is
that file: a module of that name, or a file of the project it belongs to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIRECTIVES = ("skip", "continue", "run", "output")

_FENCE = re.compile(r"^```(\S*)\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*docs-test:\s*(\S+)\s*(?:\((.*)\))?\s*-->$")
_HEADER = re.compile(r"^#\s*([\w./-]+\.(?:py|toml|cfg|ini))\b")
#: Job ids: 26 Crockford base32 characters, time-sortable (``core.ids``).
JOB_ID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")


@dataclass(frozen=True, slots=True)
class Block:
    page: Path
    line: int  # of the block's first code line, 1-based
    lang: str
    code: str
    directive: str | None = None
    reason: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def header(self) -> str | None:
        """The file this block is, from its first line (``# shop/jobs.py — …``), if any."""
        first = self.code.split("\n", 1)[0]
        found = _HEADER.match(first)
        return found.group(1) if found else None

    @property
    def is_settings(self) -> bool:
        return self.header is not None and Path(self.header).name == "settings.py"

    @property
    def is_doctest(self) -> bool:
        return self.code.lstrip().startswith(">>>")


def pages() -> list[Path]:
    """README.md and every page of docs/ (less the changelog stand-in the build replaces)."""
    docs = sorted((ROOT / "docs").rglob("*.md"))
    return [ROOT / "README.md", *(p for p in docs if p.name != "changelog.md")]


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order, with the directive before it."""
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if not opened or not opened.group(1):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        directive = reason = None
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        if said := _DIRECTIVE.match(before.strip()):
            directive, reason = said.group(1), said.group(2)
        code = "\n".join(lines[i + 1 : end]) + "\n"
        found.append(Block(page, i + 2, opened.group(1), code, directive, reason))
        i = end + 1
    return found


def same_output(expected: str, printed: str) -> bool:
    """Equal once job ids are masked (they differ per run) and trailing space is ignored."""
    return _masked(expected) == _masked(printed)


def _masked(text: str) -> str:
    return "\n".join(JOB_ID.sub("<job id>", line).rstrip() for line in text.strip().splitlines())
