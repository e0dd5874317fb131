"""A new user's project: ``testproject/manage.py`` on a database of its own, as a shell runs it.

Each test gets a fresh SQLite file that nothing has migrated, and runs the commands a new
user types, in subprocesses, reading what they print.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "testproject" / "manage.py"


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


Shell = Callable[..., Ran]


@pytest.fixture
def manage(tmp_path: Path) -> Shell:
    """``manage("runworker", "--burst")``: the testproject's manage.py on a fresh SQLite file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BLAMEQUEUE_", "DJANGO_"))}
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'shop.sqlite3'}"

    def run(*args: str, code: str | None = None, timeout: float = 60) -> Ran:
        command = [sys.executable, str(MANAGE), *args]
        if code is not None:  # python code run in the project's settings, as `manage.py shell -c`
            command = [sys.executable, str(MANAGE), "shell", "-v", "0", "-c", code]
        done = subprocess.run(
            command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=timeout
        )
        return Ran(done.returncode, done.stdout, done.stderr)

    return run
