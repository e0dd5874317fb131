"""What a user installs, checked as a user would (``make test`` runs it before pytest).

    .venv/bin/python -m tests.dist_check

1. ``python -m build`` makes the sdist, then the wheel from that sdist (so a file the sdist
   forgot fails here), without an isolated build environment (setuptools is in the dev extra:
   no download per run); ``twine check --strict`` reads both as PyPI would.
2. The wheel must hold what is not Python: the admin's templates and static files, the redis
   Lua scripts, the migrations and ``py.typed``.
3. A fresh virtualenv (``.tmp/dist/venv``) gets the wheel alone — its dependencies from PyPI
   through pip's cache — and the quickstart (docs/quickstart.md) runs against it in a new
   ``startproject`` outside this checkout: its ``shop/jobs.py``, ``migrate``, ``check``, the
   enqueues of step 4 and ``runworker --burst --wait-delayed``, whose last line must count the
   one job done and the one failed.

Every step prints one line; a failure prints the command's output and exits 1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from tests.docs.blocks import blocks

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".tmp" / "dist"
QUICKSTART = ROOT / "docs" / "quickstart.md"
#: Files of the wheel that are not modules, by a path each must contain one of.
PACKAGE_DATA = (
    "django_blamequeue/py.typed",
    "django_blamequeue/templates/admin/django_blamequeue/",
    "django_blamequeue/static/",
    "django_blamequeue/backends/redis/scripts/",
    "django_blamequeue/migrations/0001_initial.py",
)
DRAINED = "burst finished: done 1 · retried 0 · failed 1"


class Failed(Exception):
    pass


def say(message: str) -> None:
    print(f"dist check: {message}", flush=True)


def run(*command: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        shown = " ".join(str(c) for c in command)
        raise Failed(f"{shown} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def build() -> tuple[Path, Path]:
    """The sdist and the wheel built from it, checked by twine."""
    out = WORK / "out"
    shutil.rmtree(out, ignore_errors=True)
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT)
    [sdist], [wheel] = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    run(sys.executable, "-m", "twine", "check", "--strict", sdist, wheel)
    say(f"built {sdist.name} and {wheel.name}; twine check --strict passed")
    names = zipfile.ZipFile(wheel).namelist()
    missing = [p for p in PACKAGE_DATA if not any(n.startswith(p) for n in names)]
    if missing:
        raise Failed(f"the wheel lacks {', '.join(missing)}")
    return sdist, wheel


def fresh_venv(wheel: Path) -> Path:
    """A new virtualenv with the wheel installed: its python. This checkout's pip installs
    into it (``--python``: no pip of its own to bootstrap), from pip's cache where it can,
    without compiling every module of Django to bytecode first."""
    venv = WORK / "venv"
    run(sys.executable, "-m", "venv", "--clear", "--without-pip", venv)
    python = venv / "bin" / "python"
    pip = (sys.executable, "-m", "pip", "--python", python, "install", "--quiet")
    run(*pip, "--progress-bar", "off", "--no-compile", wheel)
    return python


def quickstart(python: Path) -> str:
    """docs/quickstart.md in a new project, against the installed wheel: the worker's output."""
    project = WORK / "project"
    shutil.rmtree(project, ignore_errors=True)
    project.mkdir(parents=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("BLAMEQUEUE_", "DJANGO_", "PYTEST_", "VIRTUAL_ENV"))
        and k not in ("PYTHONPATH", "DATABASE_URL")
    }
    admin = python.parent / "django-admin"
    run(admin, "startproject", "mysite", ".", cwd=project, env=env)
    run(python, "manage.py", "startapp", "shop", cwd=project, env=env)
    with (project / "mysite" / "settings.py").open("a", encoding="utf-8") as settings:
        settings.write(
            '\nINSTALLED_APPS += ["django_blamequeue", "shop"]\n'
            'DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE"}\n'
        )
    page = [b for b in blocks(QUICKSTART) if b.lang == "python"]
    [jobs] = [b for b in page if b.header == "shop/jobs.py"]
    [enqueue] = [b for b in page if "send_receipt.enqueue(" in b.code and not b.header]
    (project / "shop" / "jobs.py").write_text(jobs.code, encoding="utf-8")
    where = run(
        python, "-c", "import django_blamequeue as m; print(m.__file__)", cwd=project, env=env
    )
    if not where.strip().startswith(str(python.parent.parent)):
        raise Failed(f"the project imports django_blamequeue from {where.strip()}, not the wheel")
    manage = (python, "manage.py")
    run(*manage, "migrate", "--noinput", cwd=project, env=env)
    checked = run(*manage, "check", cwd=project, env=env)
    if "no issues" not in checked:
        raise Failed(f"manage.py check of the quickstart project:\n{checked}")
    run(*manage, "shell", "-v", "0", "-c", enqueue.code, cwd=project, env=env)
    worker = run(*manage, "runworker", "--burst", "--wait-delayed", cwd=project, env=env)
    if DRAINED not in worker:
        raise Failed(f"the quickstart's worker did not drain as the page says:\n{worker}")
    return worker


def main() -> int:
    started = time.monotonic()
    WORK.mkdir(parents=True, exist_ok=True)
    try:
        _, wheel = build()
        python = fresh_venv(wheel)
        took = time.monotonic() - started
        say(f"installed {wheel.name} alone into a fresh virtualenv (.tmp/dist/venv, {took:.0f} s)")
        quickstart(python)
    except Failed as exc:
        print(f"dist check failed: {exc}", file=sys.stderr)
        return 1
    took = time.monotonic() - started
    say(f"the quickstart ran against the installed wheel: {DRAINED} ({took:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
