"""Job ids: strings, unique, time-sortable; monotonic in a process; child ids derived."""

from __future__ import annotations

import threading
import time

from django_blamequeue.core import ids


def test_an_id_is_a_26_character_crockford_string() -> None:
    job_id = ids.new_id()
    assert isinstance(job_id, str) and len(job_id) == 26
    assert set(job_id) <= set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")


def test_ids_sort_by_creation_time() -> None:
    early = ids.new_id()
    time.sleep(0.002)  # the next millisecond: the time prefix itself must order them
    late = ids.new_id()
    assert early[:10] < late[:10]
    assert early < late


def test_the_time_prefix_is_the_creation_millisecond() -> None:
    before = time.time_ns() // 1_000_000
    job_id = ids.new_id()
    after = time.time_ns() // 1_000_000
    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    ms = 0
    for ch in job_id[:10]:
        ms = ms * 32 + alphabet.index(ch)
    assert before <= ms <= after + 1


def test_ids_are_strictly_increasing_within_a_process_even_in_one_millisecond() -> None:
    made = [ids.new_id() for _ in range(10_000)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)


def test_ids_made_by_many_threads_are_unique() -> None:
    made: list[list[str]] = [[] for _ in range(8)]

    def make(out: list[str]) -> None:
        out.extend(ids.new_id() for _ in range(2000))

    threads = [threading.Thread(target=make, args=(out,)) for out in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for out in made for i in out]
    assert len(set(every)) == len(every)
    assert all(out == sorted(out) for out in made)


def test_a_child_id_is_deterministic_in_parent_and_key() -> None:
    parent = ids.new_id()
    assert ids.child_id(parent, "p1") == ids.child_id(parent, "p1")
    assert ids.child_id(parent, "p1") != ids.child_id(parent, "p2")
    assert ids.child_id(parent, "p1") != ids.child_id(ids.new_id(), "p1")


def test_a_child_id_is_a_job_id_that_sorts_with_its_parent() -> None:
    parent = ids.new_id()
    child = ids.child_id(parent, "page-7")
    assert len(child) == 26 and child[:10] == parent[:10]


def test_lease_tokens_are_unguessable_and_distinct() -> None:
    tokens = {ids.new_token() for _ in range(1000)}
    assert len(tokens) == 1000
    assert all(len(t) == 32 for t in tokens)
