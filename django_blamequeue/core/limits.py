"""The control plane's rules, as pure functions: which claimable jobs a claim may take under a
queue's limits, and how long a job waits for a worker that has its handler.

``claimable`` is the reference of rule ``limits`` (``core.rules``): the job table evaluates it
itself, under the queue's control-row lock, on the counts it just read; the redis backend's
claim script carries a copy (``limits.lua``). Nothing here touches storage.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from django_blamequeue.core.controls import QueueLimits, RateLimit, rate_text

__all__ = ["QueueLimits", "RateLimit", "rate_text"]

NO_LIMITS = QueueLimits()


def in_force(live: QueueLimits | None, defaults: QueueLimits | None) -> QueueLimits:
    """The limits a claim obeys: the live ones set with ``set_limits`` replace the
    settings' defaults (``BLAMEQUEUE["QUEUES"]``) as a whole; ``clear_limits`` removes them.
    The job names' rate limits (``@job(rate_limit=...)``, passed with the defaults) hold
    either way."""
    if live is not None:
        if defaults is not None and defaults.name_rate_limits:
            return replace(live, name_rate_limits=defaults.name_rate_limits)
        return live
    return defaults or NO_LIMITS


@dataclass(frozen=True, slots=True, kw_only=True)
class InFlight:
    """What the engine counted for one queue just before the claim (under its lock)."""

    jobs: int = 0  # in flight (leased, not yet acked or rescued)
    by_key: Mapping[str, int] | None = None  # in flight per concurrency key
    starts: int = 0  # handler starts within the queue's rate window
    starts_by_key: Mapping[str, int] | None = None  # within the per-key window
    starts_by_name: Mapping[str, int] | None = None  # within each job name's window


def room(limit: int, limits: QueueLimits, counted: InFlight) -> int:
    """How many jobs of the queue a claim may take at most, before looking at keys."""
    free = limit
    if limits.concurrency is not None:
        free = min(free, limits.concurrency - counted.jobs)
    if limits.rate_limit is not None:
        free = min(free, limits.rate_limit[0] - counted.starts)
    return max(free, 0)


def claimable(
    candidates: Iterable[tuple[str, str | None]],
    *,
    limit: int,
    limits: QueueLimits,
    counted: InFlight,
    names: Mapping[str, str] | None = None,
) -> list[str]:
    """rule: limits — the ids a claim takes from ``candidates`` ((id, key) in claim order;
    ``names``: id → job name, where job names are rate limited).

    At most ``room`` jobs; a job whose key is at its ``key_concurrency`` (in flight plus taken
    by this claim), whose key's window holds ``key_rate_limit`` starts, or whose job name's
    window holds its ``name_rate_limits`` starts is **skipped**, never a reason to stop: the
    jobs behind it are still taken. With ``key_weights`` the candidates are first put in
    weighted-share order (``by_share``).
    """
    if limits.key_weights:
        candidates = by_share(candidates, limits, counted)
    left = room(limit, limits, counted)
    taken: list[str] = []
    per_key: dict[str, int] = {}
    by_key = counted.by_key or {}
    starts_by_key = counted.starts_by_key or {}
    rates = limits.by_name if limits.name_rate_limits else {}
    per_name: dict[str, int] = {}
    starts_by_name = counted.starts_by_name or {}
    for job_id, key in candidates:
        if len(taken) >= left:
            break
        name = names.get(job_id) if rates and names else None
        if name is not None and name not in rates:
            name = None
        if (
            name is not None
            and starts_by_name.get(name, 0) + per_name.get(name, 0) >= rates[name][0]
        ):
            continue
        if key is not None:
            mine = per_key.get(key, 0)
            if (
                limits.key_concurrency is not None
                and by_key.get(key, 0) + mine >= limits.key_concurrency
            ):
                continue
            if (
                limits.key_rate_limit is not None
                and starts_by_key.get(key, 0) + mine >= limits.key_rate_limit[0]
            ):
                continue
            per_key[key] = mine + 1
        if name is not None:
            per_name[name] = per_name.get(name, 0) + 1
        taken.append(job_id)
    return taken


def by_share(
    candidates: Iterable[tuple[str, str | None]], limits: QueueLimits, counted: InFlight
) -> list[tuple[str, str | None]]:
    """rule: shares — ``candidates`` reordered so that each next job is of the key with the
    fewest jobs in flight per unit of weight (``limits.weight_of``), the jobs before it
    counted as in flight; ties go to the heavier key, then to the key seen first. Within a
    key, claim order is kept. Jobs without a key are one weight-1 key of their own.

    Stride scheduling over what the engine counted: with two keys backlogged, their jobs in
    flight (and so their drain rates) approach the ratio of their weights; a lone key takes
    every slot. The redis claim script carries a copy (``limits.lua``)."""
    by_key = counted.by_key or {}
    waiting: dict[str | None, deque[tuple[str, str | None]]] = {}
    for c in candidates:
        waiting.setdefault(c[1], deque()).append(c)
    keyless = max(counted.jobs - sum(by_key.values()), 0)
    load = {k: by_key.get(k, 0) if k is not None else keyless for k in waiting}
    weight = {k: limits.weight_of(k) for k in waiting}
    rank = {k: i for i, k in enumerate(waiting)}
    ordered: list[tuple[str, str | None]] = []
    while waiting:
        best = min(waiting, key=lambda k: (load[k] / weight[k], -weight[k], rank[k]))
        jobs = waiting[best]
        ordered.append(jobs.popleft())
        load[best] += 1
        if not jobs:
            del waiting[best]
    return ordered


def saturated(limits: QueueLimits, counted: InFlight, keys: Iterable[str]) -> set[str]:
    """The keys among ``keys`` that may start nothing now (for a claim's search of other keys)."""
    by_key = counted.by_key or {}
    starts_by_key = counted.starts_by_key or {}
    full = set()
    for key in keys:
        if (
            limits.key_concurrency is not None and by_key.get(key, 0) >= limits.key_concurrency
        ) or (
            limits.key_rate_limit is not None
            and starts_by_key.get(key, 0) >= limits.key_rate_limit[0]
        ):
            full.add(key)
    return full


def full_names(limits: QueueLimits, counted: InFlight) -> list[str]:
    """The rate-limited job names whose window is full now: a claim leaves their jobs out."""
    starts = counted.starts_by_name or {}
    return sorted(n for n, most, _ in limits.name_rate_limits if starts.get(n, 0) >= most)


def window_scan(room_left: int) -> int:
    """How many candidates a limited claim reads in claim order before it looks key by key
    for other keys' jobs: enough that interleaved keys rarely need the second look."""
    return 2 * room_left + 16


#: How many waiting keys a claim under key weights compares at most (taking turns through
#: the rest): the engines read each one's first jobs.
SHARE_KEYS = 64


# -- jobs no worker here can run -------------------------------------------------------------
#: The wait before a handed-back job is offered again while another live worker has its
#: handler: about one poll, so that worker takes it.
HANDBACK_KNOWN = 1.0
#: The shortest and longest wait while no live worker has it (grows with the job's age, so a
#: job new code enqueued is offered again soon, and one stranded for hours costs little).
HANDBACK_MIN = 5.0
HANDBACK_MAX = 300.0


def handback_delay(age: float, *, known_elsewhere: bool) -> float:
    """Seconds before a job this worker has no handler for is offered again."""
    if known_elsewhere:
        return HANDBACK_KNOWN
    return min(HANDBACK_MAX, max(HANDBACK_MIN, age / 10))


def handler_gone(age: float, *, known_elsewhere: bool, timeout: float) -> bool:
    """Has no worker had a handler for this job for too long (``MISSING_HANDLER_TIMEOUT``,
    counted from the job's creation)? Then it fails instead of waiting forever."""
    return not known_elsewhere and age >= timeout


def served(queues: Sequence[str], live: Iterable[Iterable[str]]) -> set[str]:
    """The queues among ``queues`` that at least one live worker consumes."""
    consumed = {q for worker in live for q in worker}
    return {q for q in queues if q in consumed}
