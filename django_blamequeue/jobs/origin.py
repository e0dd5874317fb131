"""Where a job came from (the blame trail), and which model object it is about.

``capture()`` runs once per enqueue call (a whole ``enqueue_many`` batch shares one answer) and
answers a small dict, stored with the job as ``JobInfo.origin``:

- ``site``: ``"path/to/module.py:LINE in function"`` of the first frame that is the user's
  code — not this library's, Django's, asgiref's or the standard library's. One walk up the
  stack; each file is classified once and remembered, and shown relative to the
  ``sys.path`` entry it was imported from. ``BLAMEQUEUE["ORIGIN_SITE"] = False`` turns it off.
- ``request`` (``"POST /orders/"``) and ``user``: the request being served, if any. The
  method and path need no setup (``request_started`` / ``request_finished`` receivers, see
  ``apps.py``); the user needs ``django_blamequeue.middleware.OriginMiddleware`` after
  ``AuthenticationMiddleware``.
- ``parent_job``: the job whose handler enqueued this one (``current_job()``).
- ``schedule`` and ``flow``: passed in by the scheduler and the flows (``cause``).

``about_key(obj)`` names a model instance as ``"app_label.model_name:pk"``.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, Final

from django.db import models

from django_blamequeue.conf import get_settings
from django_blamequeue.context import current_job_or_none
from django_blamequeue.core import validation
from django_blamequeue.exceptions import ErrorCode, QueueError

__all__ = [
    "ABOUT",
    "About",
    "about_key",
    "capture",
    "request_finished",
    "request_started",
    "serving",
    "site",
]

ABOUT_MAX = 255


class _About:
    """The ``ABOUT`` sentinel: ``dedupe_key=ABOUT`` means "the ``about`` key of this job"."""

    _instance: _About | None = None

    def __new__(cls) -> _About:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABOUT"

    def __reduce__(self) -> str:
        return "ABOUT"


#: ``dedupe_key=ABOUT``: the key is the job's ``about``, ``"app_label.model_name:pk"``: one
#: live job per object (``enqueueing.key_or_about``, written for the control plane's
#: ``concurrency_key`` too).
ABOUT: Final = _About()
About = _About  # the sentinel's type, for annotations


def about_key(obj: object) -> str:
    """``"app_label.model_name:pk"`` for a saved model instance (or such a string, checked).

    ``QueueError(BAD_ARGUMENT)`` for anything else: an unsaved instance has no pk to find it by.
    """
    if isinstance(obj, models.Model):
        if obj.pk is None:
            raise QueueError(ErrorCode.BAD_ARGUMENT, f"about={obj!r}: the object has no pk yet")
        meta = obj._meta
        key = f"{meta.app_label}.{meta.model_name}:{obj.pk}"
    elif isinstance(obj, str):
        label, sep, pk = obj.partition(":")
        if not sep or not pk or label.count(".") != 1 or not all(label.split(".")):
            raise QueueError(
                ErrorCode.BAD_ARGUMENT,
                f'about={obj!r}: expected a model instance or "app_label.model_name:pk"',
            )
        key = obj
    else:
        raise QueueError(
            ErrorCode.BAD_ARGUMENT, f"about must be a model instance, not {type(obj).__name__}"
        )
    validation.optional_text(key, "about", ABOUT_MAX)
    return key


def split_about(about: str) -> tuple[str, str, str]:
    """``(app_label, model_name, pk)`` of an ``about`` key."""
    label, _, pk = about.partition(":")
    app_label, _, model_name = label.partition(".")
    return app_label, model_name, pk


# -- the call site -------------------------------------------------------------------------
_MISSING: Any = object()
_shown: dict[str, str | None] = {}  # co_filename -> path shown, or None for library code
_skipped: tuple[str, ...] | None = None
_roots_found: tuple[str, ...] | None = None


def _skipped_prefixes() -> tuple[str, ...]:
    """Folders whose frames are never the user's: this library, Django, asgiref, stdlib."""
    import asgiref  # Django's own dependency
    import django

    here = Path(__file__).resolve().parent.parent  # the package, not just jobs/
    folders = {str(here), str(Path(django.__file__).resolve().parent)}
    folders.add(str(Path(asgiref.__file__).resolve().parent))
    for key in ("stdlib", "platstdlib"):
        folder = sysconfig.get_paths().get(key)
        if folder:
            folders.add(str(Path(folder).resolve()))
    return tuple(f + os.sep for f in sorted(folders))


def _roots() -> tuple[str, ...]:
    """Import roots (``sys.path``), longest first: a file is shown relative to the one it
    was imported from, as its module name reads ("orders/views.py")."""
    roots = set()
    for entry in sys.path:
        try:
            roots.add(str(Path(entry or os.getcwd()).resolve()) + os.sep)
        except OSError:
            continue
    return tuple(sorted(roots, key=len, reverse=True))


def _display(filename: str) -> str | None:
    global _skipped, _roots_found
    if filename.startswith("<"):  # <frozen ...>, <string>: not a file of the user's
        return None
    if _skipped is None or _roots_found is None:
        _skipped = _skipped_prefixes()
        _roots_found = _roots()
    try:
        path = str(Path(filename).resolve())
    except OSError:
        path = filename
    if path.startswith(_skipped):
        return None
    for root in _roots_found:
        if path.startswith(root):
            return path[len(root) :]
    return path


def site(frame: FrameType | None = None) -> str | None:
    """``"path/module.py:LINE in function"`` of the nearest frame that is the user's code."""
    f: FrameType | None = frame if frame is not None else sys._getframe(1)
    while f is not None:
        code = f.f_code
        shown = _shown.get(code.co_filename, _MISSING)
        if shown is _MISSING:
            shown = _shown[code.co_filename] = _display(code.co_filename)
        if shown is not None:
            return f"{shown}:{f.f_lineno} in {_name(code)}"
        f = f.f_back
    return None


def site_of(func: Any) -> str | None:
    """The definition site of a function (a flow's ``fan_out``), as ``site`` shows one."""
    code = getattr(func, "__code__", None)
    if code is None:
        return None
    shown = _display(code.co_filename)
    return f"{shown}:{code.co_firstlineno} in {_name(code)}" if shown else None


def _name(code: CodeType) -> str:
    """The function's qualified name, without the ``<locals>`` of nested definitions."""
    return code.co_qualname.replace(".<locals>", "")


# -- the request being served ----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Serving:
    method: str
    path: str
    request: Any = None  # the HttpRequest (from OriginMiddleware), for its user


_serving: ContextVar[Serving | None] = ContextVar("blamequeue_request", default=None)


def request_started(sender: Any, environ: Any = None, scope: Any = None, **kwargs: Any) -> None:
    """``request_started`` receiver: method and path, from the WSGI environ or ASGI scope."""
    if environ is not None:
        method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")
    elif scope is not None:
        method, path = scope.get("method", ""), scope.get("path", "")
    else:
        return
    _serving.set(Serving(str(method), str(path)))


def request_finished(sender: Any, **kwargs: Any) -> None:
    _serving.set(None)


@contextmanager
def serving(request: Any) -> Iterator[None]:
    """While ``request`` is served (``OriginMiddleware``): method, path and user."""
    token = _serving.set(Serving(request.method or "", request.path, request))
    try:
        yield
    finally:
        _serving.reset(token)


def _user(request: Any) -> str | None:
    """The authenticated user's username; never fails an enqueue."""
    try:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return str(user.get_username())
    except Exception:  # a broken session or auth backend is not the enqueue's problem
        return None
    return None


# -- the whole record ------------------------------------------------------------------------
def capture(cause: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The origin of a job enqueued now; ``cause`` adds (or overrides) keys (schedule,
    flow, a flow's site)."""
    found: dict[str, Any] = {}
    if get_settings().origin_site:
        where = site(sys._getframe(1))
        if where is not None:
            found["site"] = where
    now = _serving.get()
    if now is not None:
        found["request"] = f"{now.method} {now.path}"
        if now.request is not None and (user := _user(now.request)) is not None:
            found["user"] = user
    ctx = current_job_or_none()
    if ctx is not None:
        found["parent_job"] = ctx.job_id
    if cause:
        found.update({k: v for k, v in cause.items() if v is not None})
    return found or None


def describe(origin: Mapping[str, Any] | None) -> str:
    """One line for people: "POST /orders/ by alice at orders/views.py:88 in create"."""
    if not origin:
        return "unknown"
    parts = []
    if origin.get("schedule"):
        parts.append(f"schedule {origin['schedule']}")
    if origin.get("request"):
        parts.append(str(origin["request"]))
    if origin.get("user"):
        parts.append(f"by {origin['user']}")
    if origin.get("flow") and not origin.get("parent_job"):
        parts.append(f"in flow {origin['flow']}")
    if origin.get("site"):
        parts.append(f"at {origin['site']}")
    return " ".join(parts) or "unknown"
