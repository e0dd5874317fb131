"""``bench.settings`` with the default backend on SQS (``BENCH_SQS_URL``: moto_server), its
ledger in the database of ``BENCH_DATABASE_URL``. Used by ``bench/sqs.py`` and its workers."""

from __future__ import annotations

import os

from bench.settings import *  # noqa: F403
from bench.settings import BLAMEQUEUE as _BASE

BLAMEQUEUE = {
    **_BASE,
    "BACKENDS": {
        "default": {
            "PROTOCOL": "sqs",
            "REGION": "us-east-1",
            "ENDPOINT_URL": os.environ["BENCH_SQS_URL"],
            "QUEUE_PREFIX": os.environ.get("BENCH_SQS_PREFIX", "bench-"),
            "ACCESS_KEY_ID": "bench",
            "SECRET_ACCESS_KEY": "bench",
        }
    },
}
