"""Re-encrypting the redis backend's stored jobs with the newest key (``rotate_keys``).

A batch is one ``SCAN`` over the backend's job hashes (``COUNT`` = the batch size), one
pipelined read of their sealed fields and kept attempts, the re-sealing here, then one call of
``rotate.lua``, which rewrites each job only if its state, attempt count and every field and
attempt as read are still what it holds, and it is not inflight. So an ack, a retry or a
replacing enqueue that lands between the read and the write wins, and a kill -9 leaves each
job old or new, never half: a job's fields and attempts change in one script. The scan's
cursor is where the next batch starts; SCAN guarantees every key present for the whole scan
is seen at least once, and a job seen twice is simply rewritten again (the key it has is the
first already).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django_blamequeue import encryption
from django_blamequeue.backends.redis.runner import ScriptRunner
from django_blamequeue.core.payload import Encoded
from django_blamequeue.core.records import KeyRotation

#: The sealed text fields beside the payload and result (checkpoint: ``ctx.checkpoint``).
_TEXTS = ("error", "traceback", "checkpoint")
_FIELDS = ("state", "attempts", "ctype", "cenc", "payload", "result", *_TEXTS)
#: Where an attempt entry (``keep_attempt`` in lib.lua) holds its error and traceback.
_ENTRY_TEXTS = (7, 8)


def rotate(
    runner: ScriptRunner,
    payload: Callable[[Encoded], Encoded],
    text: Callable[[str | None], str | None],
    *,
    after: str = "",
    limit: int = 500,
) -> KeyRotation:
    client, keys = runner.client, runner.keys
    cursor, found = _scan(client, int(after or 0), _glob(keys.prefix) + ":job:*", limit, keys)
    start = len(keys.prefix) + len(":job:")
    ids = [(k.decode() if isinstance(k, bytes) else k)[start:] for k in found]
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(keys.job(job_id), *_FIELDS)
    read = pipe.execute()
    jobs = [
        (job_id, row)
        for job_id, row in zip(ids, read, strict=True)
        if row[3] is not None
        and row[3].startswith(encryption.PREFIX.encode())
        and row[0] != b"inflight"
    ]
    pipe = client.pipeline(transaction=False)
    for job_id, _ in jobs:
        pipe.lrange(keys.attempts(job_id), 0, -1)
    histories = pipe.execute() if jobs else []
    blobs: list[bytes] = []

    def put(value: bytes | None) -> int | bool:
        if value is None:
            return False
        blobs.append(value)
        return len(blobs)

    calls: list[list[Any]] = []
    for (job_id, row), history in zip(jobs, histories, strict=True):
        state, attempts, ctype, cenc, body, result = row[:6]
        encoded = Encoded(ctype.decode(), cenc.decode(), body or b"")
        new = payload(encoded)
        if new.body == encoded.body:
            continue  # no key opens it: left for its key to come back
        fields: list[list[Any]] = [["payload", put(body), put(new.body)]]
        if result is not None:
            rotated = payload(Encoded(encoded.content_type, encoded.content_encoding, result))
            fields.append(["result", put(result), put(rotated.body)])
        else:
            fields.append(["result", False, False])
        for name, old in zip(_TEXTS, row[6:], strict=True):
            fields.append([name, put(old), _new_text(old, text, put)])
        entries = [
            [index, put(entry), put(new_entry)]
            for index, entry in enumerate(history)
            if (new_entry := _entry(entry, text)) is not None
        ]
        calls.append([job_id, _str(state), _str(attempts), fields, [len(history), entries]])
    rewritten = runner.run("rotate", calls, blobs).result if calls else []
    return KeyRotation(
        seen=len(jobs), rewritten=len(rewritten), last_id=str(cursor) if cursor else None
    )


def _scan(client: Any, cursor: int, match: str, count: int, keys: Any) -> tuple[int, list[Any]]:
    """One SCAN step over the backend's keys. On a Redis Cluster the backend is one hash slot,
    so its keys live on one node: the step asks that node, whose cursor it answers (a
    cluster's plain SCAN would ask some node and answer a cursor per node)."""
    from redis import RedisCluster

    if isinstance(client, RedisCluster):
        cluster: Any = client  # redis-py types a cluster's SCAN as one server's
        node = cluster.get_node_from_key(keys.job("0"))
        cursors, found = cluster.scan(cursor, match=match, count=count, target_nodes=node)
        return int(cursors[node.name]), list(found)
    next_cursor, found = client.scan(cursor, match=match, count=count)
    return int(next_cursor), list(found)


def _new_text(
    old: bytes | None, text: Callable[[str | None], str | None], put: Callable[..., Any]
) -> int | bool:
    if old is None:
        return False
    new = text(old.decode())
    return False if new is None or new == old.decode() else put(new.encode())


def _entry(entry: bytes, text: Callable[[str | None], str | None]) -> bytes | None:
    """An attempt entry with its error text re-sealed (None: nothing in it changes)."""
    fields = json.loads(entry)
    changed = False
    for i in _ENTRY_TEXTS:
        old = fields[i] if isinstance(fields[i], str) else None
        new = text(old)
        if new != old:
            fields[i], changed = new, True
    return (
        json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode() if changed else None
    )


def _str(value: bytes | None) -> str | bool:
    return False if value is None else value.decode()


def _glob(prefix: str) -> str:
    """``prefix`` with SCAN's pattern characters escaped (a hash tag's braces are not)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in prefix)
