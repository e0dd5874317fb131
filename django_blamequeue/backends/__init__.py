"""Backends by alias: one ``Backend`` object per alias, reset when settings change.

Each is built from its settings entry: the engine class the table of backends names for its
protocol (``conf.engines``), or the entry's own ``BACKEND``, imported here, on first use.
"""

from __future__ import annotations

import threading
from typing import Any

from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from django_blamequeue.backends.base import Backend
from django_blamequeue.conf import backend_config, get_settings
from django_blamequeue.conf.engines import ENGINES
from django_blamequeue.exceptions import ErrorCode, QueueError

_lock = threading.Lock()
_backends: dict[str, Backend] = {}


def _build(alias: str) -> Backend:
    config = backend_config(alias)
    if config.engine is None:  # validation refuses these first (E003, E004)
        row = ENGINES.get(config.protocol)
        if row is not None:
            raise row.refusal(alias)
        raise QueueError(ErrorCode.UNKNOWN_BACKEND, f"unknown protocol {config.protocol!r}")
    try:
        engine: type[Backend] = import_string(config.engine)
    except ModuleNotFoundError as exc:  # its client library: name the extra that installs it
        row = ENGINES.get(config.protocol)
        missing = str(exc.name or "")
        if row is None or row.extra is None or missing.startswith("django_blamequeue"):
            raise
        raise row.missing(alias, missing.partition(".")[0]) from exc
    return engine(config)


def get_backend(alias: str | None = None) -> Backend:
    """The backend for ``alias`` (default: ``DEFAULT_BACKEND``)."""
    name = alias or get_settings().default_backend
    backend = _backends.get(name)
    if backend is None:
        with _lock:
            backend = _backends.get(name)
            if backend is None:
                backend = _backends[name] = _build(name)
    return backend


def all_backends() -> list[Backend]:
    return [get_backend(alias) for alias in get_settings().backends]


def reset() -> None:
    with _lock:
        for backend in _backends.values():
            backend.close()
        _backends.clear()


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in ("BLAMEQUEUE", "DATABASES"):
        reset()


setting_changed.connect(_on_setting_changed)

__all__ = ["Backend", "all_backends", "get_backend", "reset"]
