"""Push wake-ups for idle workers: a thread holds a subscription of its own and wakes the
worker whenever one of its queues gets ready jobs.

While subscribed, ``listening`` is True and the worker waits a full poll interval between
claims, woken early by each message. After a disconnect the thread resubscribes with backoff
(0.1 s doubling to ``max_delay``), waking the worker at once when it is back; meanwhile the
worker polls. A message lost in between costs at most one poll interval. Engines differ only in
how they subscribe and read (``_subscribe``, ``_messages``, ``_close``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from abc import ABCMeta, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any

logger = logging.getLogger("django_blamequeue.listen")

#: Marks a message of the control channel (a queue paused, resumed or limited): NUL cannot
#: start a queue name, which holds no NUL (validation.storable).
CONTROL = "\x00"


class Listener(metaclass=ABCMeta):
    #: What the warning calls the subscription.
    what = "subscription"
    #: The longest wait between two reconnection attempts, in seconds.
    max_delay = 5.0

    def __init__(self, queues: Sequence[str]) -> None:
        self.queues = frozenset(queues)
        self.wake = threading.Event()
        self.listening = False
        #: Set by a control message, and at every (re)subscription (one may have been missed);
        #: the worker clears it when it re-reads the queues' control state.
        self.control_seen = True
        self.reconnects = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: Any = None

    @abstractmethod
    def _subscribe(self) -> Any:
        """A new subscription (a connection, a pub/sub object)."""

    @abstractmethod
    def _messages(self, handle: Any, timeout: float) -> Iterable[str]:
        """The queue names received within ``timeout`` seconds."""

    def _close(self, handle: Any) -> None:
        handle.close()

    def start(self, wake: threading.Event) -> None:
        self.wake = wake
        self._thread = threading.Thread(target=self._run, name="blamequeue-listen", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        handle = self._handle
        if handle is not None:
            with contextlib.suppress(Exception):  # a broken subscription is gone either way
                self._close(handle)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        delay = 0.1
        while not self._stop.is_set():
            try:
                self._handle = self._subscribe()
                self.listening = True
                delay = 0.1
                self.control_seen = True  # a control message may have been missed meanwhile
                self.wake.set()  # anything made ready while we were away: claim now
                while not self._stop.is_set():
                    for queue in self._messages(self._handle, 1.0):
                        if queue.startswith(CONTROL):
                            self.control_seen = True
                            queue = queue[len(CONTROL) :]
                        if not self.queues or queue in self.queues:
                            self.wake.set()
            except Exception as exc:
                if self._stop.is_set():
                    break
                if self.listening:
                    logger.warning("%s lost (%s); polling until it is back", self.what, exc)
                self.listening = False
                self.reconnects += 1
                self._stop.wait(delay)
                delay = min(delay * 2, self.max_delay)
            finally:
                self.listening = False
                handle, self._handle = self._handle, None
                if handle is not None:
                    with contextlib.suppress(Exception):
                        self._close(handle)
