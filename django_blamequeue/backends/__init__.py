"""Backends by alias: one ``Backend`` object per alias, reset when settings change."""

from __future__ import annotations

import threading
from typing import Any

from django.core.signals import setting_changed

from django_blamequeue.backends.base import Backend
from django_blamequeue.backends.unavailable import KNOWN, refuse
from django_blamequeue.conf import backend_config, get_settings
from django_blamequeue.exceptions import ErrorCode, QueueError

_lock = threading.Lock()
_backends: dict[str, Backend] = {}


def _build(alias: str) -> Backend:
    config = backend_config(alias)
    if config.protocol in KNOWN:
        raise refuse(config.protocol, alias)
    backend: Backend
    if config.protocol == "local":
        from django_blamequeue.backends.database import DatabaseBackend

        backend = DatabaseBackend(config)
    elif config.protocol == "redis":
        from django_blamequeue.backends.redis import RedisBackend

        backend = RedisBackend(config)
    elif config.protocol == "sqs":
        from django_blamequeue.backends.sqs import SqsBackend

        backend = SqsBackend(config)
    else:
        raise QueueError(ErrorCode.UNKNOWN_BACKEND, f"unknown protocol {config.protocol!r}")
    return backend


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
