"""The house rules of the test tree, checked on the source: every module of the package is
imported by some test module (an ``import`` statement, not a string), and every package has
tests named after it. The scanner is tested too, so the guards cannot pass by scanning
nothing. And one rule of the package's shape: classes are composed, not stacked."""

from __future__ import annotations

import ast
import importlib
import inspect
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "django_blamequeue"
TESTS = ROOT / "tests"

#: Modules no test imports yet, when these guards were added: tested only through other
#: modules, commands, views or strings. This list only shrinks — a module leaves it when a
#: test imports it (the guard below then asks for its removal); a new module never joins it.
NOT_YET_IMPORTED = frozenset(
    {
        "django_blamequeue.admin.actions",
        "django_blamequeue.admin.audit_log",
        "django_blamequeue.admin.control",
        "django_blamequeue.admin.filters",
        "django_blamequeue.admin.flows",
        "django_blamequeue.admin.jobs",
        "django_blamequeue.admin.provenance",
        "django_blamequeue.admin.schedules",
        "django_blamequeue.admin.tables",
        "django_blamequeue.apps",
        "django_blamequeue.backends.database.listen",
        "django_blamequeue.backends.hooks",
        "django_blamequeue.backends.jobtable.acks",
        "django_blamequeue.backends.jobtable.checkpoints",
        "django_blamequeue.backends.jobtable.effects",
        "django_blamequeue.backends.jobtable.flowsql",
        "django_blamequeue.backends.jobtable.inserts",
        "django_blamequeue.backends.jobtable.leases",
        "django_blamequeue.backends.jobtable.limited",
        "django_blamequeue.backends.jobtable.listing",
        "django_blamequeue.backends.jobtable.manifests",
        "django_blamequeue.backends.jobtable.rows",
        "django_blamequeue.backends.listen",
        "django_blamequeue.backends.marks",
        "django_blamequeue.backends.readback",
        "django_blamequeue.backends.redis.backend",
        "django_blamequeue.backends.redis.connection",
        "django_blamequeue.backends.rescuelog",
        "django_blamequeue.management.commands.blamequeue",
        "django_blamequeue.management.commands.runsweeper",
        "django_blamequeue.management.control",
        "django_blamequeue.management.render",
        "django_blamequeue.models.control",
        "django_blamequeue.models.flows",
        "django_blamequeue.models.trail",
        "django_blamequeue.tasks.compat",
        "django_blamequeue.tasks.results",
        "django_blamequeue.tasks.task",
    }
)


@cache
def package_modules() -> frozenset[str]:
    """Every module of the package by dotted name (a package by its own), migrations aside."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if "migrations" in parts:
            continue
        found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return frozenset(found)


def imported_by(source: str) -> set[str]:
    """The dotted names an ``import`` / ``from … import`` statement of ``source`` names,
    anywhere in it (in functions too): each prefix of a dotted module, and ``x.y`` for every
    ``from x import y`` (a submodule when ``x.y`` is one; other names match no module).
    Relative imports are the tests' own modules, never the package's."""
    names: set[str] = set()

    def module(dotted: str) -> None:
        parts = dotted.split(".")
        names.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                module(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@cache
def imported_by_tests() -> frozenset[str]:
    names: set[str] = set()
    for path in TESTS.rglob("*.py"):
        names |= imported_by(path.read_text(encoding="utf-8"))
    return frozenset(names)


def unimported() -> frozenset[str]:
    return package_modules() - imported_by_tests()


def packages() -> set[str]:
    return {p.parent.name for p in PACKAGE.glob("*/__init__.py") if p.parent.name != "migrations"}


def test_the_scan_resolves_modules_named_by_each_form_of_import() -> None:
    source = """
import django_blamequeue.core.ids
from django_blamequeue.worker import interrupt, slots as pool
from django_blamequeue.jobs.flows import Child

def later():
    from django_blamequeue.backends import wakeup
"""
    modules = imported_by(source) & package_modules()
    assert modules == {
        "django_blamequeue",
        "django_blamequeue.core",
        "django_blamequeue.core.ids",
        "django_blamequeue.worker",
        "django_blamequeue.worker.interrupt",
        "django_blamequeue.worker.slots",
        "django_blamequeue.jobs",
        "django_blamequeue.jobs.flows",
        "django_blamequeue.backends",
        "django_blamequeue.backends.wakeup",
    }


def test_a_module_reached_only_through_a_string_is_not_imported() -> None:
    source = """
import importlib
from django.core.management import call_command
importlib.import_module("django_blamequeue.worker.atomic")
call_command("runsweeper")
from . import conftest
"""
    assert not imported_by(source) & package_modules()


def test_the_package_is_scanned_whole_and_migrations_left_out() -> None:
    modules = package_modules()
    assert "django_blamequeue.worker.interrupt" in modules
    assert "django_blamequeue.management.commands.runworker" in modules
    assert len(modules) > 140
    assert not any(".migrations" in m for m in modules)


def test_every_module_is_imported_by_some_test_module() -> None:
    print(f"modules no test imports yet ({len(unimported())}):", *sorted(unimported()), sep="\n  ")
    missing = sorted(unimported() - NOT_YET_IMPORTED)
    assert missing == [], (
        "no module under tests/ imports these (a string does not count); "
        "give each a test that imports it:\n  " + "\n  ".join(missing)
    )


def test_the_modules_no_test_imports_yet_are_only_ever_fewer() -> None:
    imported_now = sorted((NOT_YET_IMPORTED & package_modules()) - unimported())
    gone = sorted(NOT_YET_IMPORTED - package_modules())
    assert (imported_now, gone) == ([], []), (
        "remove these from NOT_YET_IMPORTED in tests/unit/test_house.py "
        f"(now imported by a test: {imported_now}; no longer modules: {gone})"
    )


def test_every_package_has_tests_named_after_it() -> None:
    """A folder of that name under tests/ holding a ``test_*.py``, or a ``test_<name>.py``."""
    found = set(packages())
    assert {"worker", "core", "relay", "models"} <= found  # the scan sees the packages
    test_files = list(TESTS.rglob("test_*.py"))
    folders = {p for f in test_files for p in f.relative_to(TESTS).parent.parts}
    modules = {f.stem.removeprefix("test_") for f in test_files}
    untested = sorted(found - folders - modules)
    assert untested == [], (
        f"no tests/**/<name>/test_*.py nor tests/**/test_<name>.py for {untested}"
    )


#: The most classes of the package one class may stand on, itself included (its MRO).
TALLEST = 6


def height(cls: type) -> int:
    """How many of the package's classes make up ``cls``: its MRO, the package's part."""
    return sum(1 for c in cls.__mro__ if c.__module__.startswith("django_blamequeue"))


def test_no_class_hierarchy_is_taller_than_six() -> None:
    classes = [
        cls
        for name in sorted(package_modules())
        for _, cls in inspect.getmembers(importlib.import_module(name), inspect.isclass)
        if cls.__module__ == name
    ]
    assert len(classes) > 100  # every module imported, its own classes found
    tallest = max(classes, key=height)
    print(f"tallest: {tallest.__module__}.{tallest.__qualname__}, {height(tallest)} classes")
    assert height(tallest) <= TALLEST, [c.__qualname__ for c in tallest.__mro__]
