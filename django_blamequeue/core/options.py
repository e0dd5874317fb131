"""A job's options in one carrier: a ``@job``'s own, and the options in force for an enqueue.

A job definition (``@job``, ``@flow``, a django.tasks task) keeps its options as a
``JobOptions``. Every enqueue (``queue.enqueue`` and ``enqueue_many``, ``.delay`` /
``.apply_async``, a flow's ``Child``, ``enqueue_flow``'s children, a schedule, the
django.tasks backend) hands its keyword arguments by option name to ``jobs/enqueueing.py``,
which merges them into one ``JobOptions`` and passes that on. The rules live here, once:

- **merging** (``merge``): each option is the call's, else the job definition's, else the
  settings' default, else the built-in one. A layer *gives* an option when it names it with a
  value other than the field's default: ``None`` for most options (``max_attempts=None``
  means "the default"), ``UNSET`` for ``queue``, ``backend`` and ``priority``, where ``None``
  is a value of its own (``backend=None``: the default backend; ``priority=None``: refused).
- **checking**: ``check_defaults`` when a job is registered (``INVALID_HANDLER``), ``checked``
  for each enqueue on the merged options (``BAD_ARGUMENT``, ``MISSING_QUEUE``). Both say what
  ``core/validation.py``'s bounds say; neither touches storage.

Adding an option: a field (its metadata ``CALL`` if an enqueue's keyword may give it,
``STORED`` if ``NewJob`` stores it under the same name) and its check in one or both of those
methods. docs/design.md, "Adding a job option", lists the rest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any, Final, Literal

from django_blamequeue.core import validation
from django_blamequeue.core.controls import RateLimit
from django_blamequeue.core.retry import RetryPredicate
from django_blamequeue.core.unique import Unique
from django_blamequeue.core.unique import spec as unique_spec
from django_blamequeue.core.validation import MAX_INT, MAX_SECONDS
from django_blamequeue.exceptions import ErrorCode, QueueError


class Unset:
    """The type of ``UNSET``: an option a layer leaves to the next one. False, like ``None``."""

    _instance: Unset | None = None

    def __new__(cls) -> Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> Literal[False]:
        return False

    def __repr__(self) -> str:
        return "UNSET"

    def __reduce__(self) -> str:
        return "UNSET"


#: An option not given (``queue``, ``backend``, ``priority``: their ``None`` is a value).
UNSET: Final = Unset()


#: Field metadata. ``CALL``: an enqueue's keyword argument may give the option
#: (``job.enqueue(priority=5)``); ``STORED``: ``NewJob`` stores it under the same name.
CALL: Final = {"call": True}
STORED: Final = {"stored": True}


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOptions:
    """Options of one job: a definition's own, or those in force for an enqueue (``merge``).

    Values are as given until ``check_defaults`` or ``checked`` answers a checked copy.
    """

    #: Where the job goes: an enqueue's positional queue name, else the job's own.
    queue: str | Unset = field(default=UNSET, metadata=STORED)
    #: The backend alias; None is the default backend.
    backend: str | Unset | None = field(default=UNSET, metadata=CALL)
    #: Higher runs first among due jobs (0 unless given).
    priority: int | Unset = field(default=UNSET, metadata=CALL | STORED)
    #: Attempts before the DLQ: the call's, else the job's, else ``DEFAULT_MAX_ATTEMPTS``.
    max_attempts: int | None = field(default=None, metadata=CALL | STORED)
    #: Seconds an attempt may run (set on the job only).
    timeout: float | None = field(default=None, metadata=STORED)
    classification: str | None = field(default=None, metadata=CALL | STORED)
    #: The trace the job joins (None: the current one, else a new one; ``enqueueing``).
    trace_id: str | None = field(default=None, metadata=CALL)
    #: Seconds from now (a ``timedelta`` too) or an aware datetime; ``run_at`` wins.
    delay: float | timedelta | None = field(default=None, metadata=CALL | STORED)
    run_at: datetime | None = field(default=None, metadata=CALL | STORED)
    #: A job not started by then is cancelled instead (reason ``expired``): seconds after
    #: the enqueue (a ``timedelta`` too) or an aware datetime (docs/lifecycle.md#expiry).
    expires: float | timedelta | datetime | None = field(default=None, metadata=CALL | STORED)
    # Per job, resolved for each payload by ``enqueueing``: a text, or ``ABOUT`` (the job's
    # ``about`` key); a @job's concurrency key may be a callable of the payload.
    dedupe_key: object = field(default=None, metadata=CALL)
    concurrency_key: object = field(default=None, metadata=CALL)
    #: The model instance (or its ``"app_label.model_name:pk"``) the job is about.
    about: object = field(default=None, metadata=CALL)
    #: How the job is unique (``core/unique.py``): True, a ``Unique``, a dict of its options;
    #: ``False`` on a call turns a job's own off. Each payload's key is made by ``enqueueing``.
    unique: object = field(default=None, metadata=CALL)
    # Retries: the job's own, read by the worker when an attempt fails (``core/retry.py``).
    retryable: RetryPredicate | None = None
    backoff_base: float | None = None
    backoff_max: float | None = None
    jitter: bool | None = None
    #: Snoozes before the job fails (``snoozed_too_often``): the job's, else ``MAX_SNOOZES``.
    max_snoozes: int | None = None
    #: At most ``max`` starts of the job's name in any rolling ``per_seconds``, counted by
    #: the engine across every worker (``@job(rate_limit="10/m")``; the worker's claims).
    rate_limit: RateLimit | str | int | None = None  # as given; checked: (max, per_seconds)
    #: Payload, result and error text encrypted at rest (docs/encryption.md); None: the
    #: ``ENCRYPT`` setting decides for the job's queue.
    encrypted: bool | None = None

    @classmethod
    def merge(cls, given: Mapping[str, Any], *defaults: JobOptions | None) -> JobOptions:
        """The options in force for one enqueue: ``given`` (the call's keyword arguments, by
        option name) over ``defaults``, the most specific first (the job definition's, then
        the settings'). Each option is the first one given, else the built-in default
        (priority 0, the default backend). Not checked: see ``checked``."""
        values = list(_given_by(defaults))
        for name, value in given.items():
            i = _INDEX.get(name)
            if i is None:
                raise TypeError(f"JobOptions has no option {name!r}")
            if value is not _UNSETS[i]:
                values[i] = value
        return _build(values)

    def check_defaults(self, *, quote: bool = False) -> JobOptions:
        """A job's own options, checked when it is registered (``@job``, ``@flow``, a
        django.tasks task): ``INVALID_HANDLER`` (``MISSING_QUEUE`` for the queue). Only given
        options are checked; the copy answered has its seconds as floats. ``quote``: the
        message names a refused number or flag (the django.tasks backend's wording)."""
        if self.queue is not UNSET and (not isinstance(self.queue, str) or not self.queue.strip()):
            raise QueueError(ErrorCode.MISSING_QUEUE, "@job needs a non-empty queue name")
        attempts = self.max_attempts
        if attempts is not None and (
            not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1
        ):
            _refuse("max_attempts must be a positive int", attempts, quote)
        timeout = self.timeout
        if timeout is not None and (
            not isinstance(timeout, int | float)
            or isinstance(timeout, bool)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            _refuse("timeout must be a positive number of seconds", timeout, quote)
        if self.retryable is not None and not callable(self.retryable):
            _refuse("retryable must be a callable(exc) -> bool", self.retryable, quote)
        key = self.concurrency_key
        if key is not None and not callable(key) and (not isinstance(key, str) or not key):
            _refuse(
                "concurrency_key must be a non-empty string or a callable of the payload",
                key,
                quote,
            )
        for value, what in ((self.backoff_base, "backoff_base"), (self.backoff_max, "backoff_max")):
            if value is not None and (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or not 0 < value <= MAX_SECONDS  # also NaN
            ):
                _refuse(f"{what} must be seconds > 0 and ≤ {MAX_SECONDS:,}", value, quote)
        if self.jitter is not None and not isinstance(self.jitter, bool):
            _refuse("jitter must be True or False", self.jitter, quote)
        if self.encrypted is not None and not isinstance(self.encrypted, bool):
            _refuse("encrypted must be True or False", self.encrypted, quote)
        snoozes = self.max_snoozes
        if snoozes is not None and (
            not isinstance(snoozes, int) or isinstance(snoozes, bool) or not 0 <= snoozes <= MAX_INT
        ):
            _refuse(f"max_snoozes must be an int from 0 to {MAX_INT:,}", snoozes, quote)
        if isinstance(self.expires, datetime):
            _refuse(
                "expires on a job must be seconds (a datetime would be fixed when the module "
                "is imported); give a datetime to an enqueue",
                self.expires,
                quote,
            )
        try:
            expires = validation.expires(self.expires)
        except QueueError as exc:
            raise QueueError(ErrorCode.INVALID_HANDLER, exc.message) from None
        dedupe = self.dedupe_key
        if dedupe is not None and (not isinstance(dedupe, str) or not dedupe or len(dedupe) > 255):
            _refuse("dedupe_key must be a non-empty string of ≤255 characters", dedupe, False)
        try:
            unique = _unique(self.unique)
        except QueueError as exc:
            raise QueueError(ErrorCode.INVALID_HANDLER, exc.message) from None
        return replace(
            self,
            timeout=_float(self.timeout),
            backoff_base=_float(self.backoff_base),
            backoff_max=_float(self.backoff_max),
            unique=unique,
            expires=expires,
            rate_limit=validation.job_rate_limit(self.rate_limit),
        )

    def checked(self) -> JobOptions:
        """The merged options of one enqueue, checked against what every engine stores
        (``core/validation.py``), in this order; the copy answered holds the stored forms
        (``delay`` in seconds or None, ``run_at`` in UTC). The per-job keys (``dedupe_key``,
        ``concurrency_key``, ``about``) are checked per payload by ``enqueueing``."""
        validation.queue_name(self.queue)
        validation.priority(self.priority)
        delay = validation.delay(self.delay)
        run_at = validation.run_at(self.run_at)
        expires = validation.expires(self.expires)
        validation.positive_int(self.max_attempts, "max_attempts")
        validation.optional_text(self.classification, "classification", 100)
        validation.optional_text(self.trace_id, "trace_id", 64)
        unique = _unique(self.unique)
        if unique is not None and self.dedupe_key is not None:
            raise QueueError(
                ErrorCode.BAD_ARGUMENT,
                "give unique= or dedupe_key=, not both (dedupe_key is unique while unfinished, "
                "per queue, skipping)",
            )
        if (
            delay is self.delay
            and run_at is self.run_at
            and unique is self.unique
            and expires is self.expires
        ):
            return self  # the values checked are the values given: no copy
        values = list(_values(self))
        values[_DELAY], values[_RUN_AT] = delay, run_at
        values[_UNIQUE], values[_EXPIRES] = unique, expires
        return _build(values)

    def stored(self) -> dict[str, Any]:
        """The options ``NewJob`` stores, by its field names (``STORED``)."""
        return dict(zip(_STORED, _stored_values(self), strict=True))

    @property
    def backend_alias(self) -> str | None:
        """The backend alias given, None for the default one."""
        return self.backend or None


def _refuse(message: str, value: object, quote: bool) -> None:
    if quote:
        message = f"{message}, not {value!r}"
    raise QueueError(ErrorCode.INVALID_HANDLER, message)


def _build(values: list[Any]) -> JobOptions:
    """Options of these values, in field order: what ``__init__`` does (a frozen dataclass's
    sets each slot with ``object.__setattr__``) without its keyword arguments, for the copies
    every enqueue makes (``merge``, ``checked``)."""
    options = _new(JobOptions)
    for set_slot, value in zip(_SLOTS, values, strict=True):
        set_slot(options, value)
    return options


#: Specs checked already (a job's own, checked once at registration): id → (spec, checked).
_uniques: dict[int, tuple[object, Unique | None]] = {}


def _unique(value: object) -> Unique | None:
    """A ``unique=`` value as a checked spec (``core/unique.py``), a job's own checked once."""
    if value is None:
        return None
    cached = _uniques.get(id(value))
    if cached is not None and cached[0] is value:
        return cached[1]
    checked = unique_spec(value)
    if not isinstance(value, Unique) and value is not True:
        return checked  # a dict may change: checked each time
    if len(_uniques) >= 256:
        _uniques.clear()
    _uniques[id(value)] = (value, checked)
    if checked is not None:
        _uniques[id(checked)] = (checked, checked)
    return checked


def _float(value: float | None) -> float | None:
    return float(value) if value is not None else None


#: ``_given_by``'s answers: the ids of the layers → (the layers, what they give together).
_merges: dict[tuple[int, ...], tuple[tuple[JobOptions | None, ...], tuple[Any, ...]]] = {}


def _given_by(layers: tuple[JobOptions | None, ...]) -> tuple[Any, ...]:
    """Per field, what the first of ``layers`` (then ``BUILT_IN``) that gives it gives, else
    the field's "not given" value. Worked out once per combination: the layers under a call
    are long-lived (a job's definition, the settings) and enqueue is a hot path."""
    key = tuple(map(id, layers))
    cached = _merges.get(key)
    if cached is not None and cached[0] == layers:  # equal layers give the same
        return cached[1]
    given = list(_UNSETS)
    for layer in (*layers, BUILT_IN):
        if layer is not None:
            for i, (unset, value) in enumerate(zip(_UNSETS, _values(layer), strict=True)):
                if given[i] is _UNSETS[i] and value is not unset:
                    given[i] = value
    answer = tuple(given)
    if len(_merges) >= 1024:
        _merges.clear()
    _merges[key] = (layers, answer)
    return answer


#: The last layer of every merge: what an option is when nobody gave it.
BUILT_IN: Final = JobOptions(priority=0, backend=None)
_NAMES: Final = tuple(f.name for f in fields(JobOptions))
_INDEX: Final = {name: i for i, name in enumerate(_NAMES)}
#: Each field's "not given" value (its default), in field order.
_UNSETS: Final = tuple(f.default for f in fields(JobOptions))
_values: Final = attrgetter(*_NAMES)
_STORED: Final = tuple(f.name for f in fields(JobOptions) if f.metadata.get("stored"))
_stored_values: Final = attrgetter(*_STORED)
_SLOTS: Final = tuple(getattr(JobOptions, name).__set__ for name in _NAMES)
_new: Final = object.__new__
_DELAY: Final = _NAMES.index("delay")
_RUN_AT: Final = _NAMES.index("run_at")
_UNIQUE: Final = _NAMES.index("unique")
_EXPIRES: Final = _NAMES.index("expires")
#: Every option's name.
OPTION_NAMES: Final = frozenset(_NAMES)
#: The options an enqueue's keyword arguments may give (``job.enqueue(priority=5)``).
CALL_OPTIONS: Final = frozenset(f.name for f in fields(JobOptions) if f.metadata.get("call"))
