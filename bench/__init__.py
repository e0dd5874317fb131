"""Benchmarks (not tests); each script has ``--help``: ``.venv/bin/python bench/throughput.py``,
``peers.py``, ``flows.py``, ``orm.py`` (ORM jobs), ``ceiling.py`` (against raw psycopg),
``soak.py`` (memory and pace over a long run), ``latency.py`` (pickup latency under a paced
load, us and the peers)."""
