"""The documentation site builds with ``mkdocs build --strict``: no broken link or anchor, no
page left out of the nav, nothing fetched from elsewhere; and the lifecycle picture shows
exactly the transitions ``core.states.ALLOWED`` permits."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from django_blamequeue.core.states import ALLOWED

ROOT = Path(__file__).resolve().parents[2]
DIAGRAM = ROOT / "docs" / "img" / "lifecycle.svg"


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of ``config`` into ``site``; output captured, never printed."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # the theme's banner, not a build warning
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean"]
    return subprocess.run(
        [*command, "--config-file", str(config), "--site-dir", str(site)],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    result = mkdocs_build(ROOT / "mkdocs.yml", site)
    warnings = [line for line in result.stderr.splitlines() if line.startswith("WARNING")]
    assert result.returncode == 0 and not warnings, result.stderr
    return site


def load_tool(name: str) -> ModuleType:
    path = ROOT / "docs" / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"docs_tools_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_strict_with_every_page_in_the_nav(built_site: Path) -> None:
    for page in ("index", "quickstart", "concepts", "operations", "migrating", "changelog"):
        assert (built_site / f"{page}.html").is_file(), page
    for page in ("index", "local", "redis", "sqs"):
        assert (built_site / "backends" / f"{page}.html").is_file(), page
    assert (built_site / "img" / "lifecycle.svg").is_file()
    assert not (built_site / "tools").exists()  # the build's own scripts are not published


def test_the_site_loads_no_script_style_or_font_from_elsewhere(built_site: Path) -> None:
    remote = re.compile(r'<(?:script[^>]*\ssrc|link[^>]*\shref)="(?:https?:)?//[^"]*"')
    offenders = {
        str(page.relative_to(built_site)): remote.findall(page.read_text(encoding="utf-8"))
        for page in built_site.rglob("*.html")
    }
    assert {page: found for page, found in offenders.items() if found} == {}


def test_the_changelog_page_is_changelog_md_with_its_links_resolved(built_site: Path) -> None:
    html = (built_site / "changelog.html").read_text(encoding="utf-8")
    assert "Keep a Changelog" in html  # a phrase of CHANGELOG.md, not of the stand-in page
    assert 'href="indexes.html' in html  # (docs/indexes.md) from the repository root


def test_a_broken_link_or_anchor_fails_the_strict_build(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copy(ROOT / "CHANGELOG.md", tmp_path / "CHANGELOG.md")
    with (tmp_path / "docs" / "concepts.md").open("a", encoding="utf-8") as page:
        page.write("\n[gone](no-such-page.md) and [no anchor](lifecycle.md#no-such-heading)\n")

    result = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")

    assert result.returncode != 0
    assert "no-such-page.md" in result.stderr
    assert "#no-such-heading" in result.stderr


def test_the_lifecycle_picture_shows_exactly_the_allowed_transitions() -> None:
    svg = DIAGRAM.read_text(encoding="utf-8")
    arrows = set(re.findall(r'data-from="([a-z_]+)" data-to="([a-z_]+)"', svg))
    allowed = {(str(src), str(dst)) for src, dsts in ALLOWED.items() for dst in dsts}
    assert arrows - {("enqueue", "pending"), ("enqueue", "blocked")} == allowed
    assert {("enqueue", "pending"), ("enqueue", "blocked")} <= arrows
    boxes = set(re.findall(r'<rect data-state="([a-z_]+)"', svg))
    assert boxes == {str(state) for state in ALLOWED}


def test_the_committed_picture_is_what_the_tool_draws_now() -> None:
    tool = load_tool("lifecycle_diagram")
    assert tool.mismatch() == []
    assert DIAGRAM.read_text(encoding="utf-8") == tool.render(), (
        "docs/img/lifecycle.svg is stale: run .venv/bin/python docs/tools/lifecycle_diagram.py"
    )


def test_the_committed_zombie_picture_is_what_the_tool_draws_now() -> None:
    tool = load_tool("zombie_diagram")
    assert (ROOT / "docs" / "img" / "zombie.svg").read_text(encoding="utf-8") == tool.render(), (
        "docs/img/zombie.svg is stale: run .venv/bin/python docs/tools/zombie_diagram.py"
    )
