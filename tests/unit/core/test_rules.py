"""The rules an engine also evaluates are stated once in core.rules, and every copy names them."""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path

import pytest

import django_blamequeue
from django_blamequeue.backends.redis import lua
from django_blamequeue.core import lifecycle, limits, rules, unique
from django_blamequeue.core.states import ALLOWED, State

PACKAGE = Path(django_blamequeue.__file__).parent
#: Where each rule must be carried (by its "rule: <id>" mark): the SQL of the job table (the
#: local backend and the SQS ledger) and the Lua of the redis backend.
COPIES = {
    "fence": [
        "backends/jobtable/sql.py",
        "backends/redis/scripts/leasing.lua",
        "backends/jobtable/checkpoints.py",
        "backends/redis/scripts/checkpoint.lua",
    ],
    "cancel-wins": ["backends/jobtable/sql.py", "backends/redis/scripts/leasing.lua"],
    "rescue": [
        "core/lifecycle.py",
        "backends/redis/scripts/rescue.lua",
        "backends/redis/scripts/alone.lua",
    ],
    "dlq-retry": ["backends/jobtable/listing.py", "backends/redis/scripts/dlq_retry.lua"],
    "dag-release": ["backends/jobtable/flowsql.py", "backends/redis/scripts/lib.lua"],
    "report-once": ["backends/jobtable/flowsql.py", "backends/redis/scripts/lib.lua"],
    "settle-due": ["backends/jobtable/flowsql.py", "backends/redis/scripts/lib.lua"],
    "cascade": ["backends/jobtable/flows.py", "backends/redis/scripts/lib.lua"],
    "paused": [
        "backends/jobtable/sql.py",
        "backends/jobtable/limited.py",
        "backends/sqs/receive.py",
        "backends/redis/scripts/limits.lua",
    ],
    "expiry": [
        "backends/jobtable/sql.py",
        "backends/jobtable/limited.py",
        "backends/sqs/receive.py",
        "backends/redis/scripts/leasing.lua",
    ],
    "limits": [
        "backends/jobtable/limited.py",
        "backends/sqs/receive.py",
        "backends/redis/scripts/limits.lua",
    ],
    "shares": [
        "backends/jobtable/limited.py",
        "backends/sqs/receive.py",
        "backends/redis/scripts/limits.lua",
    ],
    # The in-transaction ack (local backend, SQS ledger) and the completion mark (redis):
    # both SQL in a Django database, the redis backend's Lua cannot join that transaction.
    "effects-once": ["backends/jobtable/effects.py", "backends/marks.py", "worker/atomic.py"],
    "unique": ["backends/jobtable/uniques.py", "backends/redis/scripts/lib.lua"],
}


def test_every_rule_has_its_engine_copies_listed() -> None:
    assert {r.id for r in rules.RULES} == set(COPIES)


@pytest.mark.parametrize("rule", sorted(COPIES))
def test_each_engine_copy_of_a_rule_names_it(rule: str) -> None:
    for path in COPIES[rule]:
        assert re.search(rf"rule: {re.escape(rule)}\b", (PACKAGE / path).read_text()), path


@pytest.mark.parametrize("rule", rules.RULES, ids=lambda r: r.id)
def test_each_rule_names_a_reference_that_exists(rule: rules.Rule) -> None:
    module, _, name = rule.reference.rpartition(".")
    target = {
        "core.rules": rules,
        "core.lifecycle": lifecycle,
        "core.limits": limits,
        "core.unique": unique,
    }[module]
    assert hasattr(target, name)


def test_lua_scripts_name_audit_actions_and_messages_never_spell_them() -> None:
    folder = files("django_blamequeue.backends.redis").joinpath("scripts")
    for script in folder.iterdir():
        text = script.read_text()
        assert "'system.queue." not in text, script.name
        assert rules.STALLED_MESSAGE not in text, script.name
    generated = lua.constants()
    assert "STALLED_MESSAGE = 'the lease expired" in generated
    assert "STALLED = 'system.queue.stalled'" in generated


@pytest.mark.parametrize(
    ("mode", "pending", "failed", "due"),
    [
        ("fail", 0, 0, True),
        ("fail", 2, 0, False),
        ("fail", 2, 1, True),
        ("continue", 2, 1, False),
        ("continue", 0, 3, True),
        (None, 1, 1, True),  # no mode stored: fail fast, the default
    ],
)
def test_settle_due(mode: str | None, pending: int, failed: int, due: bool) -> None:
    assert rules.settle_due(mode=mode, pending=pending, failed=failed) is due


def test_a_cancel_request_wins_over_every_transition_that_yields() -> None:
    assert rules.after_cancel_request(State.PENDING, yields_to_cancel=True) == State.CANCELLED
    assert rules.after_cancel_request(State.FAILED, yields_to_cancel=True) == State.CANCELLED
    assert rules.after_cancel_request(State.DONE, yields_to_cancel=False) == State.DONE


def test_rescue_cancels_a_job_asked_to_cancel_and_fails_one_that_stalled_too_often() -> None:
    kw = {"attempts": 1, "max_attempts": 3, "max_stalled": 1}
    assert lifecycle.rescue(stalls=1, **kw) == State.PENDING
    assert lifecycle.rescue(stalls=2, alone=True, **kw) == State.FAILED
    assert lifecycle.rescue(stalls=2, alone=False, **kw) == State.PENDING  # crashed in company
    assert lifecycle.rescue(stalls=1, cancel_requested=True, **kw) == State.CANCELLED
    assert lifecycle.rescue(stalls=1, attempts=3, max_attempts=3, max_stalled=1) == State.FAILED


def test_every_decided_or_rescued_state_is_allowed_from_inflight() -> None:
    policy = lifecycle.Policy()
    outcomes = [
        lifecycle.Succeeded(None),
        lifecycle.Raised(ValueError("x"), ""),
        lifecycle.TimedOut(1.0),
        lifecycle.Cancelled(),
        lifecycle.Released(),
        lifecycle.FannedOut(()),
        lifecycle.BadJob("x"),
    ]
    for attempt in (1, 3):
        for outcome in outcomes:
            t = lifecycle.decide(outcome, attempt=attempt, max_attempts=3, policy=policy)
            assert t.state in ALLOWED[State.INFLIGHT]
    for stalls in (1, 2):
        to = lifecycle.rescue(attempts=1, max_attempts=3, stalls=stalls, max_stalled=1)
        assert to in ALLOWED[State.INFLIGHT]


def test_released_and_report_once() -> None:
    assert rules.released([State.DONE, State.DONE])
    assert not rules.released([State.DONE, None])  # a dependency not stored yet
    assert rules.records_report("pending") and not rules.records_report("done")
    assert rules.cascades(parent=State.PENDING, pending_children=2)
    assert not rules.cascades(parent=State.WAITING_CHILDREN, pending_children=2)


@pytest.mark.parametrize(
    ("ack_applied", "mark_inserted", "commits"),
    [
        (True, None, True),  # the fenced ack joined the transaction
        (False, None, False),  # a stale lease: roll back
        (None, True, True),  # redis: this run's completion mark is the first
        (None, False, False),  # another run's mark is there: roll back
    ],
)
def test_an_atomic_run_commits_only_with_its_completion(
    ack_applied: bool | None, mark_inserted: bool | None, commits: bool
) -> None:
    assert rules.commits_effects(ack_applied=ack_applied, mark_inserted=mark_inserted) is commits
