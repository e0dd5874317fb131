"""wakeup: process-local wake-ups. An idle consumer registers an event on its queues; an
enqueue committed in this process sets it (and only the events of that job's queues), and a
control change also moves the epoch its control view watches."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.db import transaction

from django_blamequeue import queue
from django_blamequeue.backends import wakeup


@pytest.fixture
def registered() -> Iterator[list[tuple[list[str], threading.Event]]]:
    """``registered.append((queues, event))`` after registering; all unregistered after."""
    made: list[tuple[list[str], threading.Event]] = []
    yield made
    for queues, event in made:
        wakeup.unregister(queues, event)


def consumer_on(
    registered: list[tuple[list[str], threading.Event]], *queues: str
) -> threading.Event:
    event = threading.Event()
    wakeup.register(queues, event)
    registered.append((list(queues), event))
    return event


def test_notify_wakes_the_consumers_of_those_queues_and_no_others(
    registered: list[tuple[list[str], threading.Event]],
) -> None:
    mail = consumer_on(registered, "wake-mail")
    both = consumer_on(registered, "wake-mail", "wake-reports")
    reports = consumer_on(registered, "wake-reports")
    wakeup.notify(["wake-mail", "wake-mail", "wake-nobody"])
    assert (mail.is_set(), both.is_set(), reports.is_set()) == (True, True, False)


def test_an_unregistered_consumer_is_not_woken(
    registered: list[tuple[list[str], threading.Event]],
) -> None:
    event = consumer_on(registered, "wake-gone")
    wakeup.unregister(["wake-gone"], event)
    wakeup.unregister(["wake-never-registered"], event)  # harmless
    wakeup.notify(["wake-gone"])
    assert not event.is_set()


def test_a_control_change_moves_the_epoch_by_one_and_wakes_the_queues_consumers(
    registered: list[tuple[list[str], threading.Event]],
) -> None:
    paused = consumer_on(registered, "wake-paused")
    other = consumer_on(registered, "wake-other")
    before = wakeup.control_epoch()
    wakeup.control_changed(["wake-paused"])
    assert wakeup.control_epoch() == before + 1
    assert paused.is_set() and not other.is_set()


def test_notifying_from_many_threads_at_once_loses_no_wake_up(
    registered: list[tuple[list[str], threading.Event]],
) -> None:
    events = [consumer_on(registered, f"wake-many-{i}") for i in range(20)]
    before = wakeup.control_epoch()
    threads = [
        threading.Thread(target=wakeup.control_changed, args=([f"wake-many-{i}"],))
        for i in range(20)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert all(e.is_set() for e in events)
    assert wakeup.control_epoch() == before + 20


@pytest.mark.django_db(transaction=True, available_apps=["django_blamequeue"])
def test_an_enqueue_wakes_the_queues_consumer_when_it_commits_not_before(
    registered: list[tuple[list[str], threading.Event]],
) -> None:
    event = consumer_on(registered, "wake-committed")
    with transaction.atomic():
        queue.enqueue("wake-committed", {"n": 1})
        assert not event.is_set()  # a consumer woken now would find nothing to claim
    assert event.is_set()


@pytest.mark.django_db(transaction=True, available_apps=["django_blamequeue"])
def test_a_rolled_back_enqueue_wakes_nobody(
    registered: list[tuple[list[str], threading.Event]],
) -> None:
    event = consumer_on(registered, "wake-rolled-back")
    with pytest.raises(RuntimeError), transaction.atomic():
        queue.enqueue("wake-rolled-back", {"n": 1})
        raise RuntimeError("rolled back")
    assert not event.is_set()
