"""What only the local backend is: the job table is the queue itself — transactional,
LISTEN-able on PostgreSQL, cheap to poll on SQLite."""

from __future__ import annotations

from django_blamequeue.backends.jobtable.base import CHANNEL, CONTROL_CHANNEL, LedgerBase
from django_blamequeue.conf import BackendConfig

__all__ = ["CHANNEL", "CONTROL_CHANNEL", "LocalBase"]


class LocalBase(LedgerBase):
    """The local backend: the job table is the queue itself."""

    protocol = "local"
    transactional_enqueue = True

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self.database = self.db
        self.supports_listen = self.is_postgres and bool(config.options.get("LISTEN", True))
        self.cheap_polling = not self.is_postgres
        self.supports_apply_and_claim = True
