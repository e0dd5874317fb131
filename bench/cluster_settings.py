"""Settings of ``bench/cluster.py``'s processes: ``bench.settings`` with one redis backend per
key prefix of ``BENCH_CLUSTER_PREFIXES`` (``shard0``, ``shard1``, …), all on the Redis Cluster
of ``BENCH_CLUSTER_URL``."""

from __future__ import annotations

import os

from bench.settings import *  # noqa: F403
from bench.settings import BLAMEQUEUE

_URL = os.environ["BENCH_CLUSTER_URL"]
_PREFIXES = os.environ["BENCH_CLUSTER_PREFIXES"].split(",")

BLAMEQUEUE = {
    **BLAMEQUEUE,
    "BACKENDS": {
        f"shard{i}": {"PROTOCOL": "redis", "URL": _URL, "CLUSTER": True, "KEY_PREFIX": prefix}
        for i, prefix in enumerate(_PREFIXES)
    },
    "DEFAULT_BACKEND": "shard0",
}
