"""Benchmarks (not tests): ``.venv/bin/python bench/throughput.py --help``."""
