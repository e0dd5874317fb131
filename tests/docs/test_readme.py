"""The README opens with what a user needs (installing, a first job); the contributors' two
commands come after."""

from __future__ import annotations

import re

from tests.docs.blocks import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def sections() -> list[str]:
    return re.findall(r"^## (.+)$", README, re.M)


def test_the_readme_leads_with_the_users_install_and_quickstart() -> None:
    assert sections()[:2] == ["Install", "Quickstart"]
    install = README.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    assert "pip install '/path/to/django-blamequeue[postgres]'" in install
    assert "python -m build" in install and ".whl" in install
    assert "make demo" not in install and "make test" not in install.split("The wheel path")[0]


def test_the_two_commands_stay_for_contributors() -> None:
    [title] = [s for s in sections() if "the two commands" in s]
    assert sections().index(title) > sections().index("Quickstart")
    body = README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    assert "$ make demo" in body and "$ make test" in body
    assert "tests/dist_check.py" in body
