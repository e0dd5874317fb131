"""Every ```python block of README.md and docs/ runs, so the docs stay true.

Pages run as a new user's project would read them: Django set up with the test project's SQLite
database and **no** ``BLAMEQUEUE`` setting. Each python block runs in a fresh namespace, in
page order; directives (``tests/docs/blocks.py``) join fragments, skip a block with a reason,
run a page's ``manage.py`` commands or compare printed output. Besides running:

- a block headed ``# shop/jobs.py`` becomes the module ``shop.jobs`` for the rest of its page
  (its ``@job`` names are those the docs print), and is gone after it;
- a settings block (``# settings.py``) runs with what ``startproject`` puts above it
  (``BASE_DIR``); a ``BLAMEQUEUE`` it defines must pass ``manage.py check`` untouched, and a
  ``BLAMEQUEUE`` or ``TASKS`` it defines is in force for the rest of its page;
- a ``LOGGING`` is applied to a fresh Django process, which must keep Django's own loggers;
- a ``>>>`` block is a doctest.

A page with a ``# conftest.py`` block (testing.md) is a pytest project: its files are written
into a project made by ``startproject``/``startapp`` and its tests run there, in pytest.
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import io
import os
import shlex
import subprocess
import sys
import tomllib
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db.migrations.loader import MigrationLoader
from pytest_django import Settings as SettingsWrapper

from django_blamequeue.conf.validator import validate
from django_blamequeue.core.dag import CHILD_KEYS
from django_blamequeue.jobs import registry

from .blocks import DIRECTIVES, JOB_ID, ROOT, Block, blocks, pages, same_output

PROJECT_PAGES = [p for p in pages() if any(b.header == "conftest.py" for b in blocks(p))]
IN_PROCESS_PAGES = [
    p for p in pages() if p not in PROJECT_PAGES and any(b.lang == "python" for b in blocks(p))
]


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


# -- settings blocks -------------------------------------------------------------------------
class AnyAlias(Mapping[str, Any]):
    """DATABASES / CACHES for settings blocks that name aliases defined elsewhere in settings:
    every alias exists, as ``entry``."""

    def __init__(self, entry: Mapping[str, Any]) -> None:
        self.entry = entry

    def __getitem__(self, alias: str) -> Mapping[str, Any]:
        return self.entry

    def __contains__(self, alias: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(["default"])

    def __len__(self) -> int:
        return 1


ANY_DATABASE = AnyAlias({"ENGINE": "django.db.backends.postgresql"})
ANY_CACHE = AnyAlias({"BACKEND": "django_redis.cache.RedisCache"})

LOGGING_PROBE = """
import logging, django
from django.conf import settings
settings.configure(INSTALLED_APPS=["django_blamequeue"], LOGGING=LOGGING)
django.setup()  # Django's own logging first, then the project's LOGGING, as in any project
disabled = [n for n in ("django", "django.request", "django.server")
            if logging.getLogger(n).disabled]
assert not disabled, f"LOGGING disabled Django's loggers: {disabled}"
logging.getLogger("django_blamequeue").warning("probe")
"""


def check_logging(block: Block) -> None:
    """Apply the block's LOGGING after Django's own, in a fresh process (logging is global)."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    probe = block.code + LOGGING_PROBE
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, f"{block.where}: LOGGING\n{done.stderr}"
    assert "probe" in done.stderr, f"{block.where}: LOGGING shows no django_blamequeue record"


# -- running a page in this process ----------------------------------------------------------
class PageRun:
    """The blocks of one page, in order, with what they leave for the next ones."""

    def __init__(self, page: Path, settings: SettingsWrapper) -> None:
        self.page = page
        self.settings = settings
        self.namespace: dict[str, Any] | None = None
        self.printed = ""
        self.modules: list[str] = []
        self.jobs_before = set(registry.registered())

    def run(self) -> None:
        try:
            for block in blocks(self.page):
                self.step(block)
        finally:
            for name in self.modules:
                sys.modules.pop(name, None)
            for name in set(registry.registered()) - self.jobs_before:
                registry.unregister(name)

    def step(self, block: Block) -> None:
        if block.directive == "skip":
            self.namespace = None
        elif block.lang == "python":
            self.python(block)
        elif block.directive == "run":
            self.commands(block)
        elif block.directive == "output":
            assert same_output(block.code, self.printed), (
                f"{block.where}: the page shows\n{block.code}\nthe block before printed\n"
                f"{self.printed}"
            )

    def python(self, block: Block) -> None:
        if block.directive == "continue":
            assert self.namespace is not None, f"{block.where}: nothing to continue"
            namespace = self.namespace
        elif block.header and block.header.endswith(".py") and not block.is_settings:
            namespace = self.module(block)
        else:
            namespace = {"__name__": f"docs_{self.page.stem}_{block.line}"}
            if block.is_settings:
                namespace["BASE_DIR"] = Path("/srv/mysite")  # above it in every settings.py
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            if block.is_doctest:
                doctests(block, namespace)
            else:
                code = compile("\n" * (block.line - 1) + block.code, str(block.page), "exec")
                exec(code, namespace)
        self.printed, self.namespace = out.getvalue(), namespace
        self.settings_in_force(block, namespace)

    def module(self, block: Block) -> dict[str, Any]:
        assert block.header is not None
        name = block.header.removesuffix(".py").replace("/", ".")
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            dotted = ".".join(parts[:i])
            assert dotted in self.modules or dotted not in sys.modules, (
                f"{block.where}: the docs' module {dotted} would hide an importable one"
            )
            if dotted not in sys.modules:
                module = types.ModuleType(dotted)
                if i < len(parts):
                    module.__path__ = []
                sys.modules[dotted] = module
                self.modules.append(dotted)
                if i > 1:
                    setattr(sys.modules[".".join(parts[: i - 1])], parts[i - 1], module)
        return sys.modules[name].__dict__

    def settings_in_force(self, block: Block, namespace: dict[str, Any]) -> None:
        """Check the settings this block assigns, and put BLAMEQUEUE / TASKS in force."""
        assigned = set() if block.is_doctest else assigned_names(block.code)
        raw = namespace.get("BLAMEQUEUE") if "BLAMEQUEUE" in assigned else None
        if raw is not None:
            databases = namespace.get("DATABASES") or ANY_DATABASE
            caches = namespace.get("CACHES") or ANY_CACHE
            problems = validate(raw, databases=databases, caches=caches)
            assert problems == [], f"{block.where}: manage.py check would say {problems}"
            self.settings.BLAMEQUEUE = raw
        if "TASKS" in assigned:
            self.settings.TASKS = namespace["TASKS"]
        if "LOGGING" in assigned:
            check_logging(block)

    def commands(self, block: Block) -> None:
        for line in block.code.splitlines():
            if line.startswith("$ python manage.py "):
                args = shlex.split(line.removeprefix("$ python manage.py "))
                call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())


def assigned_names(code: str) -> set[str]:
    """The top-level names ``code`` assigns (``BLAMEQUEUE = {...}``)."""
    return {
        target.id
        for node in ast.parse(code).body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


class JobIdChecker(doctest.OutputChecker):
    """Doctest output with job ids masked: they differ at every run."""

    def check_output(self, want: str, got: str, optionflags: int) -> bool:
        return super().check_output(
            JOB_ID.sub("<job id>", want), JOB_ID.sub("<job id>", got), optionflags
        )


def doctests(block: Block, namespace: dict[str, Any]) -> None:
    test = doctest.DocTestParser().get_doctest(
        block.code, namespace, block.where, str(block.page), block.line - 1
    )
    runner = doctest.DocTestRunner(checker=JobIdChecker(), optionflags=doctest.ELLIPSIS)
    report = io.StringIO()
    runner.run(test, out=report.write, clear_globs=False)
    assert runner.failures == 0, report.getvalue()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("page", IN_PROCESS_PAGES, ids=page_id)
def test_every_python_block_of_the_page_runs(page: Path, settings: SettingsWrapper) -> None:
    del settings.BLAMEQUEUE  # a new project: no BLAMEQUEUE setting, as the pages assume
    PageRun(page, settings).run()


# -- a page that is a pytest project ---------------------------------------------------------
def new_project(where: Path) -> None:
    """``startproject mysite`` + ``startapp shop``, set up as the quickstart's step 2."""
    call_command("startproject", "mysite", str(where), verbosity=0)
    (where / "shop").mkdir()
    call_command("startapp", "shop", str(where / "shop"), verbosity=0)
    (where / "shop" / "tests.py").unlink()  # the page's tests live in tests/
    with (where / "mysite" / "settings.py").open("a", encoding="utf-8") as settings:
        settings.write(
            '\nINSTALLED_APPS += ["django_blamequeue", "shop"]\n'
            'DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE"}\n'
        )


def write_files(page: Path, project: Path) -> int:
    """The page's file blocks into ``project``; answers how many tests they define."""
    tests = 0
    for block in blocks(page):
        if block.lang not in ("python", "toml") or block.directive == "skip":
            continue
        assert block.header, f"{block.where}: a block of a project page must name its file"
        path = project / block.header
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as file:
            file.write(block.code)
        if block.lang == "python":
            tests += sum(
                isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
                for node in ast.walk(ast.parse(block.code))
            )
    return tests


@pytest.mark.parametrize("page", PROJECT_PAGES, ids=page_id)
def test_the_pages_tests_pass_under_pytest_in_a_new_project(page: Path, tmp_path: Path) -> None:
    new_project(tmp_path)
    tests = write_files(page, tmp_path)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("BLAMEQUEUE_", "DJANGO_", "PYTEST_")) and k != "PYTHONPATH"
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{tests} passed" in done.stdout.splitlines()[-1], done.stdout


# -- what the pages say about the project itself ---------------------------------------------
def test_every_directive_is_known_and_every_skip_says_why() -> None:
    for page in pages():
        for block in blocks(page):
            assert block.directive in (None, *DIRECTIVES), f"{block.where}: {block.directive}"
            if block.directive == "skip":
                assert block.reason, f"{block.where}: a skip needs a reason in parentheses"


def test_testing_md_is_run_as_a_project_and_the_other_pages_in_process() -> None:
    assert [page_id(p) for p in PROJECT_PAGES] == ["docs/testing.md"]
    assert {"README.md", "docs/quickstart.md", "docs/flows.md"} <= {
        page_id(p) for p in IN_PROCESS_PAGES
    }


def test_the_dag_example_of_flows_md_shows_every_child_key() -> None:
    [dag] = [b for b in blocks(ROOT / "docs" / "flows.md") if "enqueue_flow(" in b.code]
    keys = {
        key.value
        for node in ast.walk(ast.parse(dag.code))
        if isinstance(node, ast.Dict)
        for key in node.keys
        if isinstance(key, ast.Constant)
    }
    assert keys >= CHILD_KEYS, sorted(CHILD_KEYS - keys)


@pytest.mark.parametrize("page", ["README.md", "docs/quickstart.md"])
def test_the_migrate_output_shown_lists_every_migration_of_the_package(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    prefix = "Applying django_blamequeue."
    shown = [
        line.strip().removeprefix(prefix).removesuffix("... OK")
        for line in text.splitlines()
        if line.strip().startswith(prefix)
    ]
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    leaves = graph.leaf_nodes("django_blamequeue")
    assert len(leaves) == 1, leaves
    applied = [name for app, name in graph.forwards_plan(leaves[0]) if app == "django_blamequeue"]
    assert shown == applied  # every migration of the package, in the order migrate applies them


def test_the_testing_extra_installs_what_testing_md_asks_for() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    testing = " ".join(project["optional-dependencies"]["testing"])
    assert "pytest-django" in testing and "pytest>=" in testing
    page = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    assert "pip install 'django-blamequeue[testing]'" in page


def test_the_classifiers_name_every_django_the_docs_support_and_the_one_tested_here() -> None:
    import django

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    versions = {
        c.rsplit(" :: ", 1)[1]
        for c in project["classifiers"]
        if c.startswith("Framework :: Django :: ")
    }
    assert {"5.2", "6.0", "6.1"} <= versions
    assert "{}.{}".format(*django.VERSION[:2]) in versions
