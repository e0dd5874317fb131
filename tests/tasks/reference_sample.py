"""The crash task again, on django-tasks-db's DatabaseBackend (the reference implementation)."""

from __future__ import annotations

import time
from pathlib import Path

from django.tasks import task


@task(backend="reference", queue_name="crash")
def crash_once(marker_dir: str) -> int:
    attempt = len(list(Path(marker_dir).glob("attempt-*"))) + 1
    (Path(marker_dir) / f"attempt-{attempt}").write_text("started")
    if attempt == 1:
        time.sleep(600)
    return attempt
