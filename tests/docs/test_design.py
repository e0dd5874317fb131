"""docs/design.md's picture of the layers is the import-linter contract in pyproject.toml: the
same rows, in the same order, naming every top-level module and package of the package."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import django_blamequeue

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(django_blamequeue.__file__).parent


def _contract_rows() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers"]
    return [{name.strip() for name in re.split(r"[|:]", row)} for row in layers["layers"]]


def _picture_rows() -> list[set[str]]:
    text = (ROOT / "docs" / "design.md").read_text()
    section = text[text.index("## Layers") :]
    block = section[section.index("```text") + len("```text") : section.index("```\n", 10)]
    rows = []
    for line in block.strip("\n").splitlines():
        names = line[15:].split("▲")[0].split("│")[0]
        rows.append({n.strip() for n in names.split("·") if n.strip()})
    return rows


def _top_level() -> set[str]:
    found = set()
    for path in PACKAGE.iterdir():
        if path.name in ("migrations", "templates", "static", "__pycache__", "__init__.py"):
            continue
        if path.suffix == ".py":
            found.add(path.stem)
        elif (path / "__init__.py").exists():
            found.add(path.name)
    return found


def test_the_picture_has_the_contracts_rows_in_order() -> None:
    assert _picture_rows() == _contract_rows()


def test_every_top_level_module_and_package_is_in_a_layer() -> None:
    layered = set().union(*_contract_rows())
    assert _top_level() - layered == set()
    assert layered - _top_level() == set()


def test_the_top_of_the_package_holds_at_most_fourteen_modules() -> None:
    modules = [p for p in PACKAGE.glob("*.py")]
    assert len(modules) <= 14, sorted(p.name for p in modules)
