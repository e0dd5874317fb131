"""Unique jobs: what a ``unique=`` option means, and the rule every engine holds it by.

A unique job takes a **key** when it is stored and holds it while its state is one of its
**states** and, with a **window**, until ``window`` seconds after it was stored. Another
enqueue of the key meanwhile is a conflict, settled by its **mode**:

- ``skip``: nothing is stored; the holder is answered (``deduplicated=True``);
- ``replace``: the holder, if still ``pending``, takes the new payload;
- ``debounce``: as ``replace``, and the holder's start moves to now + ``window`` (the first
  call is delayed by ``window`` too), so the last call of a burst runs, once;
- ``reject``: ``QueueError`` ``DUPLICATE``; nothing is written.

A holder that no longer holds (its state left the states, its window ended) is taken over by
the next enqueue of its key: the engine clears its claim and stores the new job, in the same
statement or script that found it stale. A job never gets its key back (a retry, a DLQ retry).

``holds`` is the reference of rule ``unique`` (``core.rules``); the job table's upsert
(``jobtable/uniques.py``) and the redis insert (``lib.lua``) carry copies. Nothing here
touches storage. docs/unique.md is the user's page.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, Final, NoReturn
from uuid import UUID

from django_blamequeue.core.records import NewJob
from django_blamequeue.core.validation import MAX_KEY, MAX_SECONDS, shown, storable
from django_blamequeue.exceptions import ErrorCode, QueueError

SKIP, REPLACE, DEBOUNCE, REJECT = "skip", "replace", "debounce", "reject"
MODES: Final = (SKIP, REPLACE, DEBOUNCE, REJECT)
#: State groups a caller may name, besides the states themselves.
GROUPS: Final[Mapping[str, tuple[str, ...]]] = {
    "waiting": ("pending", "blocked"),
    "running": ("inflight", "waiting_children"),
    "done": ("done",),
    "failed": ("failed",),
    "cancelled": ("cancelled",),
}
STATES: Final = frozenset(s for group in GROUPS.values() for s in group)
#: When the key is given up by default: at the start for the modes that act on a waiting
#: holder (a call during a run must run again later), at the finish for the others.
_UNTIL = {SKIP: "finish", REJECT: "finish", REPLACE: "start", DEBOUNCE: "start"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Unique:
    """How a job is unique (``@job(unique=...)``, ``enqueue(..., unique=...)``).

    ``key``: a string, a callable of the payload (its None: this job is not unique), or None
    for the job's name and a hash of its payload. ``per_queue``: the key is the queue's own.
    ``window``: seconds the key is held after the enqueue (None: as long as the states say;
    for ``debounce`` the quiet time). ``states``: the states (or groups: ``waiting``,
    ``running``, ``done``, ``failed``, ``cancelled``) in which the holder holds; default by
    ``until`` (``"start"``: waiting; ``"finish"``: waiting and running), plus ``done`` with a
    window (except for debounce). ``on_conflict``: ``skip``, ``replace``, ``debounce`` or
    ``reject``.
    """

    key: str | Callable[[Any], str | None] | None = None
    per_queue: bool = False
    window: float | None = None
    states: tuple[str, ...] | None = None
    until: str | None = None
    on_conflict: str = SKIP

    def checked(self) -> Unique:
        """This spec with its values checked (``BAD_ARGUMENT``) and its states resolved."""
        mode = self.on_conflict
        if mode not in MODES:
            _refuse(f"on_conflict must be one of {', '.join(MODES)}, not {shown(mode)}")
        key = self.key
        if key is not None and not callable(key):
            _check_key(key)
        if not isinstance(self.per_queue, bool):
            _refuse(f"per_queue must be True or False, not {shown(self.per_queue)}")
        window = self.window
        if window is not None:
            if (
                isinstance(window, bool)
                or not isinstance(window, int | float)
                or not math.isfinite(window)
                or not 0 < window <= MAX_SECONDS
            ):
                _refuse(f"window must be seconds > 0 and ≤ {MAX_SECONDS:,}, not {shown(window)}")
            window = float(window)
        elif mode == DEBOUNCE:
            _refuse("on_conflict='debounce' needs window= (the quiet time before the job runs)")
        if self.until is not None and self.until not in ("start", "finish"):
            _refuse(f"until must be 'start' or 'finish', not {shown(self.until)}")
        if self.until is not None and self.states is not None:
            _refuse("give until= or states=, not both")
        return Unique(
            key=key,
            per_queue=self.per_queue,
            window=window,
            states=self._states(window),
            until=None,
            on_conflict=mode,
        )

    def _states(self, window: float | None) -> tuple[str, ...]:
        if self.states is None:
            until = self.until or _UNTIL[self.on_conflict]
            names = ["waiting"] if until == "start" else ["waiting", "running"]
            if window is not None and self.on_conflict != DEBOUNCE:
                names.append("done")
            return expand(names)
        if isinstance(self.states, str) or not isinstance(self.states, Iterable):
            _refuse(f"states must be a list of states, not {shown(self.states)}")
        return expand(self.states)

    def lock(self, name: str, queue: str, payload: Any) -> UniqueLock | None:
        """The lock a job of ``name`` in ``queue`` with ``payload`` takes (a checked spec);
        None when the key callable answers None."""
        if self.key is None:
            key: str | None = derived_key(name, payload)
        elif callable(self.key):
            try:
                key = self.key(payload)
            except Exception as exc:
                _refuse(f"the unique key of job {name!r} raised {type(exc).__name__}: {exc}")
            if key is None:
                return None
        else:
            key = self.key
        full = f"{queue}:{key}" if self.per_queue else str(key)
        _check_key(full)
        assert self.states is not None, "lock() needs a checked spec"
        debounce = self.on_conflict == DEBOUNCE
        return UniqueLock(
            key=full,
            states=encode_states(self.states),
            # A debounced holder holds while it waits: its window is the delay, not a limit.
            window=None if debounce else self.window,
            mode=self.on_conflict,
            delay=self.window if debounce else None,
        )


@dataclass(frozen=True, slots=True)
class UniqueLock:
    """What one job's enqueue asks of the engine (``NewJob``'s ``unique_*`` fields)."""

    key: str
    states: str  # encode_states(...)
    window: float | None
    mode: str
    #: ``debounce``: the job (and each call's holder) starts this many seconds after the call.
    delay: float | None = None


def spec(value: object) -> Unique | None:
    """A ``unique=`` value as a checked spec: ``True`` (the defaults), a ``Unique``, or a
    mapping of its fields; ``None``/``False`` for none. ``BAD_ARGUMENT`` otherwise."""
    if value is None or value is False:
        return None
    if value is True:
        return Unique().checked()
    if isinstance(value, Unique):
        return value.checked()
    if isinstance(value, Mapping):
        names = {f.name for f in fields(Unique)}
        unknown = sorted(set(map(str, value)) - names)
        if unknown:
            _refuse(
                f"unique has no option {', '.join(unknown)} (known: {', '.join(sorted(names))})"
            )
        given = dict(value)
        if given.get("states") is not None and not isinstance(given["states"], str):
            given["states"] = tuple(given["states"])
        return Unique(**given).checked()
    _refuse(f"unique must be True, a Unique(...) or a dict of its options, not {shown(value)}")


def expand(names: Iterable[object]) -> tuple[str, ...]:
    """States (and groups) as the sorted states they name; ``BAD_ARGUMENT`` for others."""
    found: set[str] = set()
    for name in names:
        if isinstance(name, str) and name in GROUPS:
            found.update(GROUPS[name])
        elif isinstance(name, str) and name in STATES:
            found.add(name)
        else:
            known = ", ".join([*GROUPS, *sorted(STATES - set(GROUPS))])
            _refuse(f"unique states: {shown(name)} is not a state (use {known})")
    if not found:
        _refuse("unique states must name at least one state")
    return tuple(sorted(found))


def encode_states(states: Iterable[str]) -> str:
    """The stored form: ``",pending,blocked,"``, so "holds" is a substring test in SQL/Lua."""
    return "," + ",".join(sorted(states)) + ","


def holds(state: str, states: str | None, until: datetime | None, now: datetime) -> bool:
    """rule: unique — does a holder in ``state`` (its stored ``states``, None once taken
    over; its window's end ``until``) still hold its key at ``now``?"""
    return states is not None and f",{state}," in states and (until is None or until > now)


# -- the derived key -------------------------------------------------------------------------
def derived_key(name: str, payload: Any) -> str:
    """``name:`` and 32 hex digits of SHA-256 over the payload's canonical JSON (sorted keys,
    no spaces, UTF-8), the same in every process and Python version."""
    return f"{name}:{hashlib.sha256(canonical_json(payload)).hexdigest()[:32]}"


def canonical_json(payload: Any) -> bytes:
    """The payload as canonical JSON bytes; dates, decimals, UUIDs and bytes as text.
    ``BAD_ARGUMENT`` for what JSON cannot say (then give ``key=``)."""
    try:
        text = json.dumps(
            payload,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
            default=_plain,
        )
    except (TypeError, ValueError) as exc:
        _refuse(f"cannot derive a unique key from this payload ({exc}); give unique key=")
    return text.encode("utf-8", "surrogatepass")


def _plain(value: Any) -> Any:
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal | UUID):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    raise TypeError(f"a {type(value).__name__} is not JSON")


def duplicate(key: str, holder: str, state: str, where: str = "") -> QueueError:
    """The refusal of an ``on_conflict="reject"`` enqueue whose key is held."""
    return QueueError(
        ErrorCode.DUPLICATE,
        f"unique key {key!r} is held by job {holder} ({state}){' ' + where if where else ''}; "
        "nothing was written",
    )


def check_batch(jobs: Iterable[NewJob]) -> None:
    """``DUPLICATE`` for a batch that repeats a key it may not absorb (``reject``)."""
    seen: dict[str, str] = {}
    for j in jobs:
        if j.unique_key is None:
            continue
        if j.unique_mode == REJECT and j.unique_key in seen:
            raise duplicate(j.unique_key, seen[j.unique_key], "pending", "in this batch")
        seen.setdefault(j.unique_key, j.job_id)


def _check_key(key: object) -> None:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY or not storable(key):
        _refuse(
            f"a unique key must be a non-empty string of ≤{MAX_KEY} characters without NUL, "
            f"not {shown(key)}"
        )


def _refuse(message: str) -> NoReturn:
    raise QueueError(ErrorCode.BAD_ARGUMENT, message)
