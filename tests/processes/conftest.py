"""Worker subprocesses against the test databases, and the figures each fault test prints.

Workers run as ``python -m django runworker`` with ``tests.settings`` and
``BLAMEQUEUE_TEST_SUBPROCESS=1``, so they open the very databases pytest-django created (the
tests are ``transaction=True``: what they write is committed and visible to the workers). Every
process a test starts is killed by pid when the test ends, whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Count

from django_blamequeue.models import Job
from tests.procapp.jobs import QUEUE
from tests.procapp.models import Redelivery, SideEffect

ROOT = Path(__file__).resolve().parents[2]
STARTED = "runworker"  # the banner's title line: settings loaded, consumer started
FIGURES = pytest.StashKey[list[str]]()
FAILED = pytest.StashKey[bool]()

Report = Callable[..., None]


# -- figures ---------------------------------------------------------------------------------
def _figure(label: str, value: object) -> str:
    label = label.replace("_", " ")
    if label == "s":
        return f"{value:.1f} s"
    if isinstance(value, float):
        return f"{value:.2f} {label}"
    if isinstance(value, str):
        return f"{label} {value}"
    return f"{value} {label}"


@pytest.fixture
def report(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> Report:
    """``report("chaos[postgres]", jobs=5000, kills=23, lost=0, s=41.2)`` prints
    ``chaos[postgres]: 5000 jobs, 23 kills, 0 lost, 41.2 s`` past pytest's capture, and again
    in the summary at the end of the run."""

    def emit(name: str, **figures: object) -> None:
        line = f"{name}: " + ", ".join(_figure(k, v) for k, v in figures.items())
        request.config.stash.setdefault(FIGURES, []).append(line)
        with capsys.disabled():
            print(f"\n  {line}", flush=True)

    return emit


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = config.stash.get(FIGURES, [])
    if lines:
        terminalreporter.section("fault test figures (tests/processes)")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep = yield
    if rep.failed:
        item.stash[FAILED] = True
    return rep


# -- processes -------------------------------------------------------------------------------
@dataclass(eq=False)
class Proc:
    """One manage.py subprocess; output goes to files so a full pipe can never block it."""

    popen: subprocess.Popen[bytes]
    name: str
    out: Path
    err: Path
    killed: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL by pid and reap."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            self.killed = True
        self.popen.wait(timeout=10)

    def wait(self, timeout: float) -> int | None:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def started(self) -> bool:
        """The banner is out: settings loaded, consumer running."""
        return STARTED in self.stdout()

    def wait_started(self, timeout: float = 30.0) -> None:
        """Until the banner is out (settings loaded, consumer running); fail if it died."""
        deadline = time.monotonic() + timeout
        while not self.started():
            assert self.alive(), f"{self.name} exited with {self.popen.returncode}:\n{self.tail()}"
            assert time.monotonic() < deadline, f"{self.name} did not start:\n{self.tail()}"
            time.sleep(0.02)

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait for the exit code."""
        self.signal(signal.SIGTERM)
        code = self.wait(timeout)
        assert code is not None, f"{self.name} ignored SIGTERM for {timeout} s:\n{self.tail()}"
        return code

    def tail(self, lines: int = 25) -> str:
        out = "\n".join(self.stdout().splitlines()[-lines:])
        err = "\n".join(self.stderr().splitlines()[-lines:])
        return f"--- {self.name} stdout\n{out}\n--- {self.name} stderr\n{err}"


class Processes:
    """Starts ``python -m django …`` subprocesses with the test settings; kills them all."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[Proc] = []

    def env(
        self, overrides: Mapping[str, Any] | None = None, extra: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            DJANGO_SETTINGS_MODULE="tests.settings",
            BLAMEQUEUE_TEST_SUBPROCESS="1",
            PYTHONUNBUFFERED="1",
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        )
        env.pop("BLAMEQUEUE_TEST_OVERRIDES", None)
        if overrides:
            env["BLAMEQUEUE_TEST_OVERRIDES"] = json.dumps(dict(overrides))
        env.update(extra or {})
        return env

    def spawn(
        self,
        *args: str,
        overrides: Mapping[str, Any] | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> Proc:
        n = len(self.started)
        name = f"{args[0]}-{n}"
        out, err = self.directory / f"{name}.out", self.directory / f"{name}.err"
        with out.open("wb") as o, err.open("wb") as e:
            popen = subprocess.Popen(
                [sys.executable, "-m", "django", *args],
                cwd=ROOT,
                env=self.env(overrides, extra_env),
                stdin=subprocess.DEVNULL,
                stdout=o,
                stderr=e,
            )
        proc = Proc(popen, f"{name}[{popen.pid}]", out, err)
        self.started.append(proc)
        return proc

    def worker(
        self,
        backend: str,
        *args: str,
        overrides: Mapping[str, Any] | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> Proc:
        """``runworker proc --backend BACKEND ARGS`` (the queue of ``tests.procapp``)."""
        return self.spawn(
            "runworker",
            QUEUE,
            "--backend",
            backend,
            *args,
            overrides=overrides,
            extra_env=extra_env,
        )

    def run(
        self, *args: str, extra_env: Mapping[str, str] | None = None, timeout: float = 120.0
    ) -> str:
        """Run a command to completion; its stdout, or a failure with its output."""
        proc = self.spawn(*args, extra_env=extra_env)
        code = proc.wait(timeout)
        assert code == 0, f"{' '.join(args)} exited with {code}:\n{proc.tail()}"
        return proc.stdout()

    def kill_all(self) -> None:
        for proc in self.started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)  # a stopped process cannot die until resumed
            proc.kill()

    def stderr_count(self, text: str) -> int:
        return sum(p.stderr().count(text) for p in self.started)

    def tails(self) -> str:
        return "\n".join(p.tail() for p in self.started)


@pytest.fixture
def processes(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.kill_all()
        if request.node.stash.get(FAILED, False):
            with capsys.disabled():
                print(f"\n{procs.tails()}", flush=True)


# -- reading the outcome ---------------------------------------------------------------------
def engine(backend: str) -> str:
    """The name a figure shows for a backend alias of tests/settings.py."""
    return {"default": "sqlite"}.get(backend, backend)


def states(db: str) -> dict[str, int]:
    rows = Job.objects.using(db).filter(queue=QUEUE).order_by().values_list("state")
    return dict(rows.annotate(n=Count("id")).values_list("state", "n"))


def count(db: str, state: str) -> int:
    n: int = Job.objects.using(db).filter(queue=QUEUE, state=state).count()
    return n


def effects(db: str) -> int:
    n: int = SideEffect.objects.using(db).count()
    return n


def redeliveries(db: str) -> list[Redelivery]:
    return list(Redelivery.objects.using(db).all())


def wait_for(
    predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05
) -> float:
    """Poll until ``predicate()``; answer the seconds it took; fail with ``what`` if late."""
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, f"timed out after {timeout:g} s: {what}"
        time.sleep(interval)
    return time.monotonic() - start
