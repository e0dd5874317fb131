"""What a backend asks of the layers above it (``Hooks``), and where they are installed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Hooks(Protocol):
    """What a backend asks of the layers above it, without importing them.

    The backends sit below the services (the outbox relay, flow routing, the sweeper), so a
    backend cannot call them; it calls these hooks instead, and ``routing`` installs the real
    ones when the app is ready. Each hook only hastens work that the sweeper would also do:
    until they are installed nothing is lost, only later.
    """

    def outbox_written(self) -> None:
        """Entries were committed to an outbox (the table, or an engine's own): relay soon."""

    def settle_soon(self, alias: str, parent_ids: Sequence[str]) -> None:
        """A commit recorded child reports on these parents of backend ``alias``: settle the
        due ones (in a transaction of their own, never inside an ack)."""

    def cancel_elsewhere(self, children: Sequence[tuple[str, str]]) -> None:
        """Cancel these ``(backend alias, job id)`` children that live on other backends
        (a cascade reached them); a failure is left to the flow sweeper."""


class _Unhooked:
    """Before ``install_hooks``: nobody is told, and the sweeper does the work later."""

    def outbox_written(self) -> None:
        pass

    def settle_soon(self, alias: str, parent_ids: Sequence[str]) -> None:
        pass

    def cancel_elsewhere(self, children: Sequence[tuple[str, str]]) -> None:
        pass


_hooks: Hooks = _Unhooked()


def current_hooks() -> Hooks:
    return _hooks


def install_hooks(hooks: Hooks) -> None:
    """Give every backend (built or not) these hooks; ``routing.install`` calls it."""
    global _hooks
    _hooks = hooks


__all__ = ["Hooks", "current_hooks", "install_hooks"]
