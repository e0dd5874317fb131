"""Value objects of the control plane: a queue's control state, a registered worker, and the
jobs that wait for a handler. They cross the backend boundary and reach the public API."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase

RateLimit = tuple[int, float]
#: ``(pattern, weight)`` pairs: a concurrency key's share weight is that of the first
#: pattern (``fnmatch`` glob, case-sensitive) it matches, else ``DEFAULT_WEIGHT``.
KeyWeights = tuple[tuple[str, int], ...]
DEFAULT_WEIGHT = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueLimits:
    """Limits that hold across every worker of a backend, for one queue (``None``: no limit).

    ``concurrency``: jobs of the queue in flight at once; ``key_concurrency``: in flight at
    once per concurrency key; ``rate_limit`` / ``key_rate_limit``: ``(max, per_seconds)``,
    at most ``max`` handler starts in any rolling window of ``per_seconds``, for the queue /
    per key. A job without a concurrency key counts only toward the queue's limits.

    ``name_rate_limits``: ``(job name, max, per_seconds)`` of the jobs declared with
    ``@job(rate_limit=...)``; a window per name, shared by every queue of the backend. They
    are the code's, not the control plane's: a worker passes them with each claim, and live
    limits (``set_limits``) leave them in force.

    ``key_weights``: weighted shares between concurrency keys (docs/weighted-shares.md): a
    claim serves first the waiting key with the fewest jobs in flight per unit of weight.
    """

    concurrency: int | None = None
    key_concurrency: int | None = None
    rate_limit: RateLimit | None = None
    key_rate_limit: RateLimit | None = None
    name_rate_limits: tuple[tuple[str, int, float], ...] = ()
    key_weights: KeyWeights = ()

    @property
    def empty(self) -> bool:
        return (
            self.concurrency is None
            and self.key_concurrency is None
            and self.rate_limit is None
            and self.key_rate_limit is None
            and not self.name_rate_limits
            and not self.key_weights
        )

    @property
    def by_name(self) -> dict[str, RateLimit]:
        """``name_rate_limits`` as name → ``(max, per_seconds)``."""
        return {name: (most, per) for name, most, per in self.name_rate_limits}

    @property
    def keyed(self) -> bool:
        """Does a claim need to know each job's key (a per-key limit is set)?"""
        return (
            self.key_concurrency is not None
            or self.key_rate_limit is not None
            or bool(self.key_weights)
        )

    def weight_of(self, key: str | None) -> int:
        """A key's share weight: its first matching pattern's, else 1 (jobs without a key
        share one weight-1 slot of their own)."""
        if key is not None:
            for pattern, weight in self.key_weights:
                if fnmatchcase(key, pattern):
                    return weight
        return DEFAULT_WEIGHT

    def describe(self) -> str:
        """``concurrency 3 · per key 1 · 20/1 s · per key 5/1 s``, or ``none``."""
        parts = []
        if self.concurrency is not None:
            parts.append(f"concurrency {self.concurrency}")
        if self.key_concurrency is not None:
            parts.append(f"per key {self.key_concurrency}")
        if self.rate_limit is not None:
            parts.append(f"rate {rate_text(self.rate_limit)}")
        if self.key_rate_limit is not None:
            parts.append(f"rate per key {rate_text(self.key_rate_limit)}")
        if self.key_weights:
            parts.append("weights " + weights_text(self.key_weights))
        for name, most, per in self.name_rate_limits:
            parts.append(f"{name} {rate_text((most, per))}")
        return " · ".join(parts) or "none"


def rate_text(rate: RateLimit) -> str:
    return f"{rate[0]}/{rate[1]:g} s"


def weights_text(weights: KeyWeights) -> str:
    """``enterprise:*=5, free:*=1``."""
    return ", ".join(f"{pattern}={weight}" for pattern, weight in weights)


#: ``ControlState.source``: where the limits in force come from.
LIVE, SETTINGS, NONE = "live", "settings", "none"


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlState:
    """What a backend stores for one queue: paused or not, and the live limits (``None``:
    none were set, the settings' defaults apply). ``version`` grows with every change."""

    queue: str
    paused: bool = False
    reason: str = ""
    paused_at: datetime | None = None
    paused_by: str | None = None
    live: QueueLimits | None = None
    version: int = 0
    updated_at: datetime | None = None

    def in_force(self, defaults: QueueLimits | None) -> QueueLimits:
        if self.live is not None:
            return self.live
        return defaults or QueueLimits()

    def source(self, defaults: QueueLimits | None) -> str:
        if self.live is not None:
            return LIVE
        return SETTINGS if defaults is not None and not defaults.empty else NONE


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueControl:
    """``queue.control()``: a queue's pause state and the limits in force, with their source
    (``"live"``: set with ``set_limits``; ``"settings"``: ``BLAMEQUEUE["QUEUES"]``)."""

    backend: str
    queue: str
    paused: bool
    reason: str
    paused_at: datetime | None
    paused_by: str | None
    limits: QueueLimits
    source: str
    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerInfo:
    """One worker of the registry (``queue.workers()``). ``state``: ``running``,
    ``stalled`` (alive, but its loop has claimed and acked nothing for
    ``WORKER_STALLED_AFTER`` while jobs are due and no handler runs), ``stopping`` (draining
    after a signal), ``stopped`` (it said so), or ``gone`` (its heartbeats stopped: it
    died). ``running``: the ids of the jobs it runs now."""

    worker_id: str
    backend: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    running: tuple[str, ...]
    started_at: datetime
    last_seen: datetime
    state: str
    version: str = ""
    job_names: tuple[str, ...] = ()
    stopped_at: datetime | None = None
    done: int = 0
    failed: int = 0

    @property
    def live(self) -> bool:
        return self.state in ("running", "stalled", "stopping")


@dataclass(frozen=True, slots=True, kw_only=True)
class HandlerWait:
    """Pending jobs of one name that a worker handed back for lack of a handler."""

    queue: str
    name: str
    count: int
