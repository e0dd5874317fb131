"""Claims of paused or limited queues on the job-table backends (local, the SQS ledger).

A limited claim locks the queue's control row first (``SELECT … FOR UPDATE``; SQLite's write
transaction serialises claimers anyway), so every worker's claims of that queue take turns,
and each counts afresh, after the lock, what is in flight: the jobs whose state is
``inflight`` (a crashed worker's stay counted until the sweeper rescues their leases; an ack,
a release or a cancel frees the slot at once) and the starts in the rate windows (rows of
``blamequeue_rate_start``, deleted once they leave the window). ``core.limits.claimable``
decides (rule: limits), on the counts just read, in the same transaction as the claim.

Job names' rate limits (``@job(rate_limit=...)``, ``name_rates.py``) are counted the same way,
under a lock per name taken before the queues' rows; a claim leaves out the jobs of a name
whose window is full, so they never hold up the queue's other jobs.

Per-key limits skip a key that is full and go on: the claim reads candidates in claim order
(priority, then ``available_at``, then id); if that window is all full keys, it walks the
queue's other keys (``bq_job_key_claim``, one index probe per key, round robin from the last
key it served) and takes their first jobs, so one tenant's backlog never starves another.

Under key weights (rule: shares) the claim always reads the first jobs of up to ``SHARE_KEYS``
waiting keys besides the window, and ``core.limits.by_share`` orders them: the key with the
fewest jobs in flight per unit of weight first (docs/weighted-shares.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from django_blamequeue.backends.jobtable import sql
from django_blamequeue.backends.jobtable.control_rows import weights_from
from django_blamequeue.backends.jobtable.name_rates import NameRates
from django_blamequeue.backends.jobtable.rows import claimed_from_row
from django_blamequeue.backends.jobtable.table import JobTable
from django_blamequeue.core import limits as rule
from django_blamequeue.core.limits import InFlight, QueueLimits
from django_blamequeue.core.records import Claimed
from django_blamequeue.core.rules import claims_from

CONTROL = "blamequeue_queue_control"
RATE = "blamequeue_rate_start"
_CONTROL_COLUMNS = (
    "paused, has_limits, concurrency, key_concurrency, rate_max, rate_per, key_rate_max, "
    "key_rate_per, key_cursor, key_weights"
)


@dataclass(frozen=True, slots=True)
class Gate:
    """A limited queue, locked for this claim: its limits in force and what was counted."""

    queue: str
    limits: QueueLimits
    counted: InFlight
    now: datetime
    cursor: str | None
    #: Job names of the candidates read (id → name), where names are rate limited.
    names: dict[str, str] = field(default_factory=dict)


Candidates = list[tuple[str, str | None]]


class LimitedClaims:
    """Claims of a job table's paused or limited queues, under each queue's control row."""

    def __init__(self, table: JobTable) -> None:
        self.table = table
        self.name_rates = NameRates(table)

    def lock_names(self, limits: Mapping[str, QueueLimits], queues: Sequence[str]) -> None:
        """Before any queue's row: the locks of every job name limited in ``queues``."""
        self.name_rates.lock(
            name for q in queues if q in limits for name, _, _ in limits[q].name_rate_limits
        )

    # -- the lock and the counts -----------------------------------------------------------
    def _lock_control(self, queue: str) -> tuple[Any, ...]:
        """The queue's control row, locked for this transaction (made if missing)."""
        lock = " FOR UPDATE" if self.table.is_postgres else ""
        select = f"SELECT {_CONTROL_COLUMNS} FROM {CONTROL} WHERE backend = %s AND queue = %s"
        with self.table.connection.cursor() as cur:
            cur.execute(select + lock, [self.table.alias, queue])
            row = cur.fetchone()
            if row is None:
                cur.execute(
                    f"INSERT INTO {CONTROL} (backend, queue, paused, reason, has_limits, "
                    "limited, version) VALUES (%s, %s, %s, '', %s, %s, 0) "
                    "ON CONFLICT (backend, queue) DO NOTHING",
                    [self.table.alias, queue, False, False, False],
                )
                cur.execute(select + lock, [self.table.alias, queue])
                row = cur.fetchone()
        return tuple(row)

    def gate(
        self,
        queue: str,
        defaults: QueueLimits | None,
        now: datetime | None,
        *,
        scan: int = 0,
    ) -> tuple[Gate, Candidates] | None:
        """Lock ``queue``'s control row and count; None when it is paused (rule: paused).
        With ``scan``, also the first ``scan`` candidates in claim order (on PostgreSQL in
        the same statement as the clock and the count, unless job names are limited). Take
        the names' locks first (``lock_names``)."""
        row = self._lock_control(queue)
        paused, has_limits, c, kc, rmax, rper, krmax, krper, cursor, weights = row
        if not claims_from(paused=bool(paused)):
            return None
        live = None
        if has_limits:
            live = QueueLimits(
                concurrency=c,
                key_concurrency=kc,
                rate_limit=(rmax, float(rper)) if rmax is not None and rper is not None else None,
                key_rate_limit=(krmax, float(krper))
                if krmax is not None and krper is not None
                else None,
                key_weights=weights_from(weights),
            )
        limits = rule.in_force(live, defaults)
        if self.table.is_postgres and scan and not limits.name_rate_limits:
            t, jobs, by_key, candidates = self._look(queue, now, scan)
            counted = self._count(queue, limits, t, inflight=(jobs, by_key))
            return Gate(queue, limits, counted, t, cursor), candidates
        t = now if now is not None else self._clock()
        counted = self._count(queue, limits, t)
        if limits.name_rate_limits:
            counted = replace(counted, starts_by_name=self.name_rates.count(limits, t))
        gate = Gate(queue, limits, counted, t, cursor)
        if not scan:
            return gate, []
        full = rule.full_names(limits, counted)  # their jobs are left out: no head of line
        return gate, self._candidates(queue, t, scan, gate.names, full)

    def _look(
        self, queue: str, now: datetime | None, scan: int
    ) -> tuple[datetime, int, dict[str, int], list[tuple[str, str | None]]]:
        """PostgreSQL, after the lock: the clock, the jobs in flight by key and the first
        ``scan`` candidates in claim order, in one round trip."""
        t = self.table.name
        clock = "COALESCE(%s::timestamptz, statement_timestamp())"
        statement = (
            f"SELECT 0, NULL::varchar, NULL::varchar, 0::bigint, {clock} "
            f"UNION ALL SELECT 1, NULL, concurrency_key, count(*), NULL FROM {t} "
            "WHERE queue = %s AND state = 'inflight' GROUP BY concurrency_key "
            "UNION ALL SELECT 2, c.id, c.concurrency_key, 0, NULL FROM ("
            f"SELECT id, concurrency_key FROM {t} WHERE state = 'pending' AND queue = %s "
            f"AND available_at <= {clock} AND {sql.not_expired(clock)} "  # rule: expiry
            "ORDER BY priority DESC, available_at, id LIMIT %s) c"
        )
        jobs, by_key, candidates = 0, {}, []
        stamp: datetime | None = None
        with self.table.connection.cursor() as cur:
            cur.execute(statement, [now, queue, queue, now, now, scan])
            for kind, job_id, key, n, clock_value in cur.fetchall():
                if kind == 0:
                    stamp = clock_value
                elif kind == 1:
                    jobs += n
                    if key is not None:
                        by_key[key] = n
                else:
                    candidates.append((job_id, key))
        assert stamp is not None
        return stamp, jobs, by_key, candidates

    def _clock(self) -> datetime:
        """The engine's clock read after the lock (not the statement's start time, which may
        precede the wait): a claim's starts are stamped after the previous holder's."""
        if not self.table.is_postgres:
            return timezone.now()
        with self.table.connection.cursor() as cur:
            cur.execute("SELECT clock_timestamp()")
            value: datetime = cur.fetchone()[0]
            return value

    def _count(
        self,
        queue: str,
        limits: QueueLimits,
        t: datetime,
        *,
        inflight: tuple[int, dict[str, int]] | None = None,
    ) -> InFlight:
        """What is in flight (unless ``inflight`` was read already) and the rate windows'
        starts; a window's rows older than it are deleted first."""
        jobs, by_key = inflight or (0, {})
        starts, by_key_starts = 0, {}
        a = self.table.adapt
        with self.table.connection.cursor() as cur:
            if inflight is None and (
                limits.concurrency is not None
                or limits.key_concurrency is not None
                or limits.key_weights
            ):
                cur.execute(
                    f"SELECT concurrency_key, count(*) FROM {self.table.name} "
                    "WHERE queue = %s AND state = 'inflight' GROUP BY concurrency_key",
                    [queue],
                )
                for key, n in cur.fetchall():
                    jobs += n
                    if key is not None:
                        by_key[key] = n
            for rate, keyed in ((limits.rate_limit, False), (limits.key_rate_limit, True)):
                if rate is None:
                    continue
                since = a(t - timedelta(seconds=rate[1]))
                scope = "key <> ''" if keyed else "key = ''"
                where = f"WHERE backend = %s AND queue = %s AND {scope}"
                cur.execute(
                    f"DELETE FROM {RATE} {where} AND started_at <= %s",
                    [self.table.alias, queue, since],
                )
                cur.execute(
                    f"SELECT key, count(*) FROM {RATE} {where} GROUP BY key",
                    [self.table.alias, queue],
                )
                for key, n in cur.fetchall():
                    if keyed:
                        by_key_starts[key] = n
                    else:
                        starts = n
        return InFlight(jobs=jobs, by_key=by_key, starts=starts, starts_by_key=by_key_starts)

    def record_starts(self, gate: Gate, claimed: Sequence[Claimed]) -> None:
        """The claimed jobs' starts, in the windows that count them."""
        self.name_rates.record(gate.limits, claimed, gate.now)
        rows: list[Any] = []
        alias, stamp = self.table.alias, self.table.adapt(gate.now)
        for c in claimed:
            if gate.limits.rate_limit is not None:
                rows += [alias, gate.queue, "", stamp]
            if gate.limits.key_rate_limit is not None and c.concurrency_key is not None:
                rows += [alias, gate.queue, c.concurrency_key, stamp]
        if rows:
            values = ", ".join(["(%s, %s, %s, %s)"] * (len(rows) // 4))
            with self.table.connection.cursor() as cur:
                cur.execute(
                    f"INSERT INTO {RATE} (backend, queue, key, started_at) VALUES {values}", rows
                )

    # -- the local backend's limited claim (the SQS backend's: ``sqs/receive.py``) -----------
    def claim(
        self,
        queues: Sequence[str],
        limit: int,
        lease_s: float,
        now: datetime | None,
        defaults: Mapping[str, QueueLimits],
    ) -> list[Claimed]:
        """Inside the caller's transaction: claim up to ``limit`` jobs of ``queues`` under
        their limits (queues locked in name order, so two claimers never deadlock)."""
        claimed: list[Claimed] = []
        self.lock_names(defaults, queues)
        for queue in sorted(set(queues)):
            left = limit - len(claimed)
            if left <= 0:
                break
            looked = self.gate(queue, defaults.get(queue), now, scan=rule.window_scan(left))
            if looked is None:
                continue
            gate, candidates = looked
            ids = self._pick(gate, left, candidates)
            if ids:
                got = self._lease_ids(ids, lease_s, gate.now)
                self.record_starts(gate, got)
                claimed += got
        return claimed

    def _pick(
        self, gate: Gate, limit: int, candidates: Sequence[tuple[str, str | None]]
    ) -> list[str]:
        """The ids to claim: ``candidates`` (the first in claim order), then (per-key limits)
        other keys' first jobs if the candidates were all of full keys."""
        room = rule.room(limit, gate.limits, gate.counted)
        if room <= 0:
            return []
        if gate.limits.key_weights:  # rule: shares — every waiting key's first jobs compete
            candidates = [*candidates, *self.waiting_keys(gate, room, candidates)]
        ids = rule.claimable(
            candidates, limit=limit, limits=gate.limits, counted=gate.counted, names=gate.names
        )
        if gate.limits.key_weights:
            return ids
        if gate.limits.keyed and len(ids) < room and len(candidates) >= rule.window_scan(limit):
            ids += self._other_keys(gate, limit, ids, candidates)
        return ids

    def _candidates(
        self, queue: str, t: datetime, n: int, names: dict[str, str], full: Sequence[str] = ()
    ) -> Candidates:
        """The first ``n`` due jobs in claim order, none of the job names in ``full``; their
        names go into ``names``."""
        at = self.table.adapt(t)
        skip = f"AND name NOT IN ({sql.placeholders(full)}) " if full else ""
        with self.table.connection.cursor() as cur:
            cur.execute(
                f"SELECT id, concurrency_key, name FROM {self.table.name} "
                f"WHERE state = 'pending' AND queue = %s AND available_at <= %s "
                f"AND {sql.not_expired('%s')} {skip}"
                "ORDER BY priority DESC, available_at, id LIMIT %s",
                [queue, at, at, *full, n],
            )
            return _named(cur.fetchall(), names)

    def _other_keys(
        self,
        gate: Gate,
        limit: int,
        taken: list[str],
        seen: Sequence[tuple[str, str | None]],
    ) -> list[str]:
        """The first jobs of keys beyond the window, taking turns from the last key served."""
        key_of = dict(seen)
        mine: dict[str, int] = {}
        for job_id in taken:
            key = key_of.get(job_id)
            if key is not None:
                mine[key] = mine.get(key, 0) + 1
        by_key = dict(gate.counted.by_key or {})
        by_starts = dict(gate.counted.starts_by_key or {})
        for key, n in mine.items():
            by_key[key] = by_key.get(key, 0) + n
            by_starts[key] = by_starts.get(key, 0) + n
        by_name = dict(gate.counted.starts_by_name or {})
        for job_id in taken:
            if (name := gate.names.get(job_id)) is not None:
                by_name[name] = by_name.get(name, 0) + 1
        counted = InFlight(
            jobs=gate.counted.jobs + len(taken),
            by_key=by_key,
            starts=gate.counted.starts + len(taken),
            starts_by_key=by_starts,
            starts_by_name=by_name,
        )
        left = rule.room(limit - len(taken), gate.limits, counted)
        if left <= 0:
            return []
        full = rule.saturated(gate.limits, counted, {*by_key, *by_starts})
        keys = self._walk_keys(gate, sorted(full), left)
        if not keys:
            return []
        per_key = gate.limits.key_concurrency or left
        heads = self._heads(gate.queue, gate.now, keys, min(left, per_key), gate.names)
        return rule.claimable(
            heads, limit=limit - len(taken), limits=gate.limits, counted=counted, names=gate.names
        )

    def waiting_keys(
        self, gate: Gate, room: int, seen: Sequence[tuple[str, str | None]]
    ) -> Candidates:
        """Under key weights: the first ``room`` jobs of up to ``SHARE_KEYS`` keys with due
        work (not full, taking turns from the queue's cursor), beyond those in ``seen``."""
        full = rule.saturated(gate.limits, gate.counted, gate.counted.by_key or {})
        keys = self._walk_keys(gate, sorted(full), rule.SHARE_KEYS)
        if not keys:
            return []
        known = {job_id for job_id, _ in seen}
        per_key = min(room, gate.limits.key_concurrency or room)
        heads = self._heads(gate.queue, gate.now, keys, per_key, gate.names)
        return [c for c in heads if c[0] not in known]

    def _walk_keys(self, gate: Gate, full: Sequence[str], wanted: int) -> list[str]:
        """Up to ``wanted`` keys with pending jobs, none of ``full``, in key order after the
        queue's cursor (wrapping once); the cursor moves to the last key taken."""
        found: list[str] = []
        start = gate.cursor or ""
        for after, upto in ((start, None), ("", start)) if start else (("", None),):
            found += self._walk(gate.queue, after, upto, full, wanted - len(found), found)
            if len(found) >= wanted:
                break
        if found:
            with self.table.connection.cursor() as cur:
                cur.execute(
                    f"UPDATE {CONTROL} SET key_cursor = %s WHERE backend = %s AND queue = %s",
                    [found[-1], self.table.alias, gate.queue],
                )
        return found

    def _walk(
        self,
        queue: str,
        after: str,
        upto: str | None,
        full: Sequence[str],
        wanted: int,
        found: Sequence[str],
    ) -> list[str]:
        """One index probe per key (a loose index scan), skipping ``full`` and ``found``."""
        if wanted <= 0:
            return []
        skip = [*full, *found]
        t = self.table.name
        nxt = (
            f"SELECT concurrency_key FROM {t} WHERE state = 'pending' AND queue = %s "
            "AND concurrency_key > {prev} ORDER BY concurrency_key LIMIT 1"
        )
        skip_param: Any = skip
        if self.table.is_postgres:
            excluded = "NOT (k = ANY(%s::varchar[]))"
        else:
            excluded, skip_param = "k NOT IN (SELECT value FROM json_each(%s))", json.dumps(skip)
        bound = " AND k <= %s" if upto is not None else ""
        statement = (
            "WITH RECURSIVE walk(k, n) AS ("
            f"SELECT ({nxt.format(prev='%s')}), 1 "
            "UNION ALL "
            f"SELECT ({nxt.format(prev='walk.k')}), walk.n + 1 FROM walk "
            "WHERE walk.k IS NOT NULL AND walk.n < %s"
            f") SELECT k FROM walk WHERE k IS NOT NULL AND {excluded}{bound} LIMIT %s"
        )
        params: list[Any] = [queue, after, queue, len(skip) + wanted + 16, skip_param]
        if upto is not None:
            params.append(upto)
        params.append(wanted)
        with self.table.connection.cursor() as cur:
            cur.execute(statement, params)
            return [r[0] for r in cur.fetchall()]

    def _heads(
        self, queue: str, t: datetime, keys: Sequence[str], per_key: int, names: dict[str, str]
    ) -> Candidates:
        """Each key's first ``per_key`` due jobs, in claim order within the key (their job
        names into ``names``)."""
        one = (
            f"SELECT id, concurrency_key, name FROM {self.table.name} WHERE state = 'pending' "
            "AND queue = %s AND concurrency_key = {key} AND available_at <= %s "
            f"AND {sql.not_expired('%s')} ORDER BY priority DESC, available_at, id LIMIT %s"
        )
        with self.table.connection.cursor() as cur:
            if self.table.is_postgres:
                cur.execute(
                    "SELECT h.id, h.concurrency_key, h.name FROM unnest(%s::varchar[]) "
                    "WITH ORDINALITY AS u(k, i) CROSS JOIN LATERAL ("
                    + one.format(key="u.k")
                    + ") AS h ORDER BY u.i",
                    [list(keys), queue, t, t, per_key],
                )
                return _named(cur.fetchall(), names)
            heads: Candidates = []
            for key in keys:
                at = self.table.adapt(t)
                cur.execute(one.format(key="%s"), [queue, key, at, at, per_key])
                heads += _named(cur.fetchall(), names)
            return heads

    def _lease_ids(self, ids: Sequence[str], lease_s: float, t: datetime) -> list[Claimed]:
        """Lease the picked jobs still pending (a cancel may have won meanwhile)."""
        a = self.table.adapt
        expires = a(t + timedelta(seconds=lease_s))
        if self.table.is_postgres:
            token = "replace(gen_random_uuid()::text, '-', '')"
            where, params = "id = ANY(%s::varchar[])", [expires, a(t), a(t), list(ids), a(t)]
        else:
            token = "lower(hex(randomblob(16)))"
            where = f"id IN ({sql.placeholders(ids)})"
            params = [expires, a(t), a(t), *ids, a(t)]
        with self.table.connection.cursor() as cur:
            cur.execute(
                f"UPDATE {self.table.name} SET state = 'inflight', attempts = attempts + 1, "
                f"lease_token = {token}, lease_expires_at = %s, started_at = %s, "
                f"updated_at = %s WHERE {where} AND state = 'pending' "
                f"AND {sql.not_expired('%s')} RETURNING {sql.CLAIM_COLUMNS}",
                params,
            )
            return [claimed_from_row(r) for r in cur.fetchall()]


def _named(rows: Sequence[tuple[Any, ...]], names: dict[str, str]) -> Candidates:
    """Rows of (id, key, name) as candidates; each job's name into ``names``."""
    names.update((r[0], r[2]) for r in rows)
    return [(r[0], r[1]) for r in rows]
