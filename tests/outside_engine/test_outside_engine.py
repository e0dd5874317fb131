"""An engine from outside the package is configured by its dotted path alone, and passes the
conformance suite the way docs/writing-a-backend.md tells its author to run it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pytest_django import Settings as SettingsWrapper

from django_blamequeue import conf, queue
from django_blamequeue.backends import get_backend
from tests.outside_engine.engine import Engine

ROOT = Path(__file__).resolve().parents[2]
PATH = "tests.outside_engine.engine.Engine"
#: A representative part of the suite (about 190 tests, 20 s): the lifecycle, leases and rescue,
#: retries and the DLQ, dedupe, transactions, flows, the control plane.
SUITE = [
    f"tests/conformance/test_{name}.py"
    for name in (
        "smoke",
        "enqueue",
        "lease",
        "retry",
        "rescue",
        "cancel",
        "dlq",
        "dedupe",
        "transactions",
        "flows_parent_child",
        "flows_dag",
        "control",
        "api_misc",
        "checkpoints",
    )
]


@pytest.mark.django_db(transaction=True)
def test_an_entry_naming_only_its_backend_builds_that_class_with_the_local_options(
    settings: SettingsWrapper,
) -> None:
    settings.BLAMEQUEUE = {"BACKENDS": {"default": {"PROTOCOL": "local"}, "out": {"BACKEND": PATH}}}
    assert conf.problems() == []
    config = conf.backend_config("out")
    assert (config.engine, config.protocol) == (PATH, "local")
    assert dict(config.options) == conf.BACKEND_DEFAULTS["local"]
    assert type(get_backend("out")) is Engine
    job_id = queue.enqueue("outside", {"n": 1}, backend="out").job_id
    assert queue.get_job(job_id, backend="out").state == "pending"  # type: ignore[union-attr]


def test_the_conformance_suite_passes_on_it_as_its_author_runs_it(tmp_path: Path) -> None:
    """``pytest tests/conformance --blamequeue-engine ALIAS=PATH``, in a process of its own with
    none of this run's servers (its own SQLite test database, in ``tmp_path``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BLAMEQUEUE_", "PYTEST_"))}
    env["BLAMEQUEUE_TEST_TMP"] = str(tmp_path)
    command = [sys.executable, "-m", "pytest", *SUITE, "-q", "-p", "no:cacheprovider"]
    engine = ["--blamequeue-engine", f"outside={PATH}", "-k", "outside and not sqlite"]
    done = subprocess.run(
        [*command, *engine], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None and int(passed.group(1)) >= 100, summary
