"""worker/atomic.detached: a progress write or a lease extension made from inside an atomic
handler runs on another thread (so on another connection, outside the handler's
transaction, which a rollback would otherwise take with it) and answers the verb's result."""

from __future__ import annotations

import threading

from django_blamequeue.worker.atomic import detached


def test_a_detached_verb_runs_on_another_thread_and_answers_its_result() -> None:
    seen: list[str] = []

    def verb() -> bool:
        seen.append(threading.current_thread().name)
        return True

    assert detached(verb) is True
    assert seen and seen[0] != threading.current_thread().name
    assert seen[0].startswith("blamequeue-detached")


def test_a_detached_verb_that_refuses_answers_false() -> None:
    assert detached(lambda: False) is False
