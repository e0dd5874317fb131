"""Job ids: 26-character, time-sortable, unique across backends and processes.

A ULID-style layout (48-bit milliseconds, 80 random bits, Crockford base32). Ids made in one
process are strictly increasing even within a millisecond, so FIFO ties within one
``enqueue_many`` batch keep their order. Child ids are derived, so re-enqueueing dedups.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_RANDOM_BITS = 80
_lock = threading.Lock()
_last_ms = 0
_last_rand = 0


_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # 10 bits → 2 characters


def _b32(value: int, length: int) -> str:
    """``value`` as ``length`` base32 characters (``length`` even), two per table look-up:
    ids are minted per job on the enqueue path, so this is hot."""
    return "".join(_PAIRS[(value >> (10 * i)) & 1023] for i in range(length // 2 - 1, -1, -1))


def new_id() -> str:
    """A fresh job id; monotonic within this process."""
    global _last_ms, _last_rand
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            rand = _last_rand + 1
            if rand >= 1 << _RANDOM_BITS:  # astronomically unlikely: borrow the next ms
                ms += 1
                rand = int.from_bytes(os.urandom(10), "big") >> 1
        else:
            rand = int.from_bytes(os.urandom(10), "big") >> 1  # headroom for increments
        _last_ms, _last_rand = ms, rand
    return _b32((ms << _RANDOM_BITS) | rand, 26)


def child_id(parent_id: str, key: str) -> str:
    """Deterministic id of a flow child: same parent and key, same id."""
    digest = hashlib.sha256(f"{parent_id}\x00{key}".encode()).digest()
    return parent_id[:10] + _b32(int.from_bytes(digest[:10], "big"), 16)


def new_token() -> str:
    """A lease token: unguessable, so only the worker that claimed can ack."""
    return os.urandom(16).hex()
