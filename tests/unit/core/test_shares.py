"""Weighted shares between concurrency keys (rule: shares): the pure pick and the weights'
validation."""

from __future__ import annotations

from collections import Counter

import pytest

from django_blamequeue.core.controls import QueueLimits
from django_blamequeue.core.limits import InFlight, by_share, claimable
from django_blamequeue.core.validation import key_weight_pairs, parse_key_weight
from django_blamequeue.exceptions import ErrorCode, QueueError

WEIGHTED = QueueLimits(key_weights=(("enterprise:*", 5),))


def backlog(n: int, *keys: str | None) -> list[tuple[str, str | None]]:
    """``n`` jobs of each key, the keys' jobs interleaved in claim order."""
    return [(f"{k}-{i}", k) for i in range(n) for k in keys]


def split(ids: list[str]) -> Counter[str]:
    return Counter(i.rsplit("-", 1)[0] for i in ids)


def test_two_backlogged_keys_split_a_claim_by_their_weights() -> None:
    jobs = backlog(20, "free:bob", "enterprise:acme")
    taken = claimable(jobs, limit=12, limits=WEIGHTED, counted=InFlight())
    assert split(taken) == {"enterprise:acme": 10, "free:bob": 2}


def test_jobs_in_flight_count_toward_a_keys_share() -> None:
    jobs = backlog(20, "free:bob", "enterprise:acme")
    counted = InFlight(jobs=5, by_key={"enterprise:acme": 5})
    taken = claimable(jobs, limit=1, limits=WEIGHTED, counted=counted)
    assert split(taken) == {"free:bob": 1}


def test_a_lone_key_takes_every_slot_whatever_its_weight() -> None:
    taken = claimable(backlog(20, "free:bob"), limit=12, limits=WEIGHTED, counted=InFlight())
    assert len(taken) == 12


def test_jobs_without_a_key_share_as_one_weight_one_key() -> None:
    jobs = backlog(10, None, "enterprise:acme")
    taken = claimable(jobs, limit=6, limits=WEIGHTED, counted=InFlight())
    assert split(taken) == {"enterprise:acme": 5, "None": 1}


def test_claim_order_is_kept_within_a_key() -> None:
    order = [c[0] for c in by_share(backlog(3, "a", "b"), WEIGHTED, InFlight())]
    assert [i for i in order if i.startswith("a")] == ["a-0", "a-1", "a-2"]


def test_a_full_key_gives_its_turn_to_the_next() -> None:
    limits = QueueLimits(key_weights=(("enterprise:*", 5),), key_concurrency=2)
    jobs = backlog(10, "enterprise:acme", "free:bob")
    taken = claimable(jobs, limit=6, limits=limits, counted=InFlight())
    assert split(taken) == {"enterprise:acme": 2, "free:bob": 2}


def test_the_first_matching_pattern_gives_the_weight() -> None:
    limits = QueueLimits(key_weights=(("vip:*", 3), ("*", 2)))
    assert [limits.weight_of(k) for k in ("vip:x", "other", None)] == [3, 2, 1]


@pytest.mark.parametrize(
    "bad",
    [
        "enterprise:*=5",
        {"": 5},
        {"a\x00": 5},
        {"a\ud800": 5},
        {"x" * 256: 5},
        {"a": 0},
        {"a": 1001},
        {"a": 2.5},
        {"a": True},
        {1: 5},
        [("a", 1), ("a", 2)],
        [("a",)],
        {f"k{i}": 1 for i in range(101)},
    ],
    ids=repr,
)
def test_bad_key_weights_are_refused_with_bad_key_weight(bad: object) -> None:
    with pytest.raises(QueueError) as info:
        key_weight_pairs(bad)
    assert info.value.code == ErrorCode.BAD_KEY_WEIGHT


def test_weights_keep_the_order_given() -> None:
    assert key_weight_pairs({"b*": 2, "a*": 3}) == (("b*", 2), ("a*", 3))
    assert parse_key_weight("team=a:*=4") == ("team=a:*", 4)
    with pytest.raises(QueueError):
        parse_key_weight("enterprise:*")
