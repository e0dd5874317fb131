"""MkDocs hooks of the documentation site (``hooks:`` in mkdocs.yml; local code, no network).

``changelog.md`` is a stand-in: the build replaces its text with ``CHANGELOG.md`` from the
repository root, so the changelog is written in one place. Links in that file are relative
to the root (``docs/indexes.md``); inside the site they are relative to ``docs/``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = ROOT / "CHANGELOG.md"
_DOCS_LINK = re.compile(r"\]\(docs/")


def changelog_markdown() -> str:
    """CHANGELOG.md with its ``docs/…`` links made relative to the docs directory."""
    return _DOCS_LINK.sub("](", CHANGELOG.read_text(encoding="utf-8"))


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri == "changelog.md":
        return changelog_markdown()
    return markdown
