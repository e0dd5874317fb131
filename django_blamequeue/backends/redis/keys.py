"""Key names and times of the redis backend.

Every key starts with the backend's prefix inside a hash tag, ``{blamequeue}:…``, so all keys
of one backend live in one hash slot: each Lua script touches a single slot and runs on Redis
Cluster unchanged. The price, stated: one backend is one slot (one shard); to spread load
over a cluster, configure several backends with different ``KEY_PREFIX`` values.

Layout (``P`` = the tagged prefix; times are integer microseconds since the epoch):

==============================  ==============================================================
``P:job:ID``                    hash: every field of the job (payload bytes as stored); the
                                lease fields (token, expires) mean something only while the
                                job is inflight, and every fence checks the state
``P:q:QUEUE:ready``             zset, due pending jobs: score ``-priority``, member
                                ``available_at`` (16 digits) + id, so ties sort by time, then id
``P:q:QUEUE:delayed``           zset, pending jobs not yet due: score = due time
``P:q:QUEUE:blocked``           set, DAG jobs waiting on dependencies
``P:q:QUEUE:waiting``           set, flow parents in ``waiting_children``
``P:q:QUEUE:done|cancelled``    zsets by finish time (retention, stats)
``P:q:QUEUE:failed``            zset by finish time; ``P:q:QUEUE:dlq`` the same ids by id
``P:q:QUEUE:dedupe``            hash, dedupe key → id of the non-terminal job holding it
``P:inflight``                  zset of leased ids by lease expiry (the rescuer's scan)
``P:leased``                    hash, queue → number of leased jobs (moved once per script call)
``P:queues``                    set of queue names
``P:deps:ID`` / ``P:dependants:ID``  sets: a DAG job's unfinished dependencies / dependants
``P:flow:FLOW``                 set of a flow's job ids
``P:about:KEY``                 zset of the ids of the jobs about an object (``about`` key),
                                score = enqueue time (``jobs_about``: newest first)
``P:m:PARENT``                  hash, a parent's manifest: ``s:``/``k:``/``b:``/``j:``/``r:``/
                                ``t:``/``e:`` + child id (status, key, backend, spec, result,
                                result type, error); counters ``kp``/``kd``/``kf``/``kc`` on the
                                parent's hash make a settle O(1)
``P:waiting``                   zset (score 0) of parked parents, paged by the flow sweeper
``P:cascade``                   set of parents with unfinished children on other backends
``P:outbox``, ``P:ob:EID``      zset of unsent outbox entries (FIFO), one hash per entry;
                                ``P:outbox:leased`` entries being sent; ``P:outbox:n:KIND``
                                unsent entries per job id
``P:wake``                      pub/sub channel: queue names with newly ready jobs
``P:ctlwake``                   pub/sub channel: queues paused, resumed or limited
``P:ctls``                      set of queues with a control hash (``P:q:QUEUE:ctl``)
``P:q:QUEUE:ctl|kin|rate|...``  a queue's control state, keys in flight, rate windows,
                                ready jobs by key (``limits.lua``)
``P:q:QUEUE:nohandler``         set of pending jobs handed back for lack of a handler
``P:att:ID``                    list: the job's attempt history, JSON entries (``lib.lua``
                                ``keep_attempt``), deleted with the job
``P:ts:STEP:START``             hash: a chart bucket of ``STEP`` seconds from ``START``
                                (seconds), a field per queue and name (``buckets.lua``);
                                it expires once its resolution's window has passed
``P:expiring``                  zset of the ids of waiting jobs with an expiry, by it (a job's
                                ``exp`` field); ``P:q:QUEUE:expired`` those cancelled as
                                expired, by when (stats)
``P:nrate:NAME``                zset, a job name's rate window (``@job(rate_limit=...)``)
==============================  ==============================================================
"""

from __future__ import annotations

from datetime import UTC, datetime

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def tagged(prefix: str) -> str:
    """``KEY_PREFIX`` inside a hash tag, unless it already carries one."""
    if "{" in prefix and "}" in prefix.split("{", 1)[1]:
        return prefix
    return "{" + prefix + "}"


def to_us(value: datetime) -> int:
    """An aware datetime as integer microseconds since the epoch (exact)."""
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_us(value: bytes | str | int | bool | None) -> datetime | None:
    if value is None or value is False or value == b"" or value == "":
        return None
    us = int(value)
    return datetime.fromtimestamp(us // 1_000_000, UTC).replace(microsecond=us % 1_000_000)


class Keys:
    """Key names for one prefix, for the few reads done outside the scripts."""

    def __init__(self, prefix: str) -> None:
        self.prefix = tagged(prefix)
        self.wake = f"{self.prefix}:wake"
        self.outbox = f"{self.prefix}:outbox"
        self.outbox_leased = f"{self.prefix}:outbox:leased"
        self.waiting = f"{self.prefix}:waiting"
        self.cascade = f"{self.prefix}:cascade"
        self.leased = f"{self.prefix}:leased"
        self.control_wake = f"{self.prefix}:ctlwake"
        self.controls = f"{self.prefix}:ctls"
        self.queues = f"{self.prefix}:queues"

    def job(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}"

    def queue(self, queue: str, part: str) -> str:
        return f"{self.prefix}:q:{queue}:{part}"

    def flow(self, flow_id: str) -> str:
        return f"{self.prefix}:flow:{flow_id}"

    def about(self, about: str) -> str:
        return f"{self.prefix}:about:{about}"

    def manifest(self, parent_id: str) -> str:
        return f"{self.prefix}:m:{parent_id}"

    def attempts(self, job_id: str) -> str:
        return f"{self.prefix}:att:{job_id}"

    def bucket(self, step: int, start: int) -> str:
        return f"{self.prefix}:ts:{step}:{start}"

    def unsent(self, kind: str) -> str:
        return f"{self.prefix}:outbox:n:{kind}"
