"""The benchmark's latency histogram answers percentiles within its stated error."""

from __future__ import annotations

import math
import random

import pytest

from bench.hdr import Histogram


def exact(sorted_values: list[float], q: float) -> float:
    """The sample of rank ceil(q/100 · n), the definition the histogram answers."""
    return sorted_values[max(1, math.ceil(q / 100 * len(sorted_values))) - 1]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_percentiles_are_within_the_stated_relative_error_of_a_sorted_list(seed: int) -> None:
    rng = random.Random(seed)
    # A latency-like mix: a log-normal body around 2 ms and a tail up to seconds.
    values = [rng.lognormvariate(math.log(2.0), 0.6) for _ in range(20_000)]
    values += [rng.uniform(50, 3_000) for _ in range(300)]
    h = Histogram(lowest=0.001)
    for v in values:
        h.record(v)
    values.sort()
    for q in (1, 10, 50, 90, 95, 99, 99.9):
        want = exact(values, q)
        assert abs(h.percentile(q) - want) <= h.error * want, q
    assert h.percentile(100) == values[-1]
    assert h.total == len(values)


def test_memory_is_bounded_by_the_range_not_the_count() -> None:
    h = Histogram(lowest=0.001, sub_bits=7)
    rng = random.Random(0)
    for _ in range(200_000):
        h.record(rng.uniform(0.001, 1_000.0))
    powers_of_two = math.ceil(math.log2(1_000.0 / 0.001))
    assert len(h.counts) <= powers_of_two * h.sub


def test_a_merged_histogram_answers_as_one_that_saw_every_sample() -> None:
    rng = random.Random(5)
    a, b, both = Histogram(), Histogram(), Histogram()
    for i in range(5_000):
        v = rng.expovariate(0.5)
        (a if i % 2 else b).record(v)
        both.record(v)
    a.merge(b)
    assert a.counts == both.counts and a.total == both.total and a.max == both.max
    assert a.summary() == both.summary()
    again = Histogram.from_json(a.to_json())
    assert again.counts == a.counts and again.summary() == a.summary()


def test_values_below_the_lowest_count_in_one_bucket_and_an_empty_histogram_has_no_answer() -> None:
    h = Histogram(lowest=0.01)
    assert math.isnan(h.percentile(50))
    h.record(0.0)
    h.record(0.005)
    assert h.total == 2 and len(h.counts) == 1
    assert h.percentile(50) == 0.005  # the midpoint, clamped to the largest value seen
