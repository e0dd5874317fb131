"""The contenders of ``bench/peers.py``: one module per queue library, run in child processes.

``harness`` holds what every contender shares (worker processes by pid, CPU accounting, the
phases of the workload); each other module adapts one library to it. The peers' modules import
their library, which lives only in ``.tmp/bench-peers/venv`` (never in the project's .venv).
"""
