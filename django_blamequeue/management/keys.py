"""``manage.py blamequeue rotate-keys``: every stored encrypted job re-encrypted with the first
of ``ENCRYPTION_KEYS``, so that an old key can leave the list (docs/encryption.md). Mixed into
the command; one progress line per batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError

from django_blamequeue import encryption
from django_blamequeue.backends.base import Backend
from django_blamequeue.core.payload import Encoded
from django_blamequeue.exceptions import ErrorCode, QueueError
from django_blamequeue.jobs import steprows


def add_arguments(sub: Any) -> None:
    rotate = sub.add_parser(
        "rotate-keys",
        help="re-encrypt stored jobs with the first ENCRYPTION_KEYS key (then retire old keys)",
    )
    rotate.add_argument("--batch", type=int, default=500, help="rows per transaction")


def _payload(encoded: Encoded) -> Encoded:
    """A payload or result re-encrypted; one no key opens is kept as it is (the job waits in
    the DLQ as ``decrypt_failed`` for its key to come back) and must not stop the others."""
    try:
        rotated = encryption.rotate(encoded)
    except QueueError:
        return encoded
    return encoded if rotated is None else rotated


def _text(text: str | None) -> str | None:
    """Stored sealed text re-encrypted (plain text stays plain: rotating a key encrypts
    nothing new); text no key opens is kept as it is (its job's payload tells the same
    story, and dropping it would lose the only copy)."""
    if not encryption.is_sealed_text(text):
        return text
    try:
        return encryption.seal_text(encryption.open_text(text))
    except QueueError:
        return text


class KeyCommands:
    """The ``rotate-keys`` verb of ``manage.py blamequeue``."""

    stdout: Any
    stderr: Any
    backends: Callable[[dict[str, Any]], list[Backend]]  # ControlCommands' method

    def do_rotate_keys(self, options: dict[str, Any]) -> None:
        if options["batch"] < 1:
            raise CommandError(f"--batch must be at least 1, not {options['batch']}")
        skipped = []
        databases: list[str] = []
        for backend in self.backends(options):
            if backend.effects_database not in databases:
                databases.append(backend.effects_database)
            if not backend.supports_key_rotation:
                skipped.append(backend.alias)
                self.stderr.write(
                    f"backend {backend.alias} ({backend.protocol}): cannot re-encrypt in place; "
                    "keep the old key in ENCRYPTION_KEYS until its jobs are gone"
                )
                continue
            self._rotate(backend, options["batch"])
        for db in databases:
            self._rotate_workflows(db, options["batch"])
        if skipped and options["backend"]:
            raise QueueError(
                ErrorCode.KEY_ROTATION_UNSUPPORTED,
                f"backend {skipped[0]} cannot re-encrypt stored jobs in place",
            )

    def _rotate(self, backend: Backend, batch: int) -> None:
        seen = rewritten = left_old = 0
        after = ""
        while True:
            step = backend.rotate_keys(_payload, _text, after=after, limit=batch)
            seen += step.seen
            rewritten += step.rewritten
            left_old += step.left_old
            if step.last_id is None:
                break
            after = step.last_id
            self.stdout.write(
                f"backend {backend.alias}: {rewritten:,} re-encrypted of {seen:,} read…"
            )
        skipped = seen - rewritten
        note = (
            f"; {skipped:,} left as they were (no key opens them, or they changed while read: "
            "run again)"
            if skipped
            else ""
        )
        self.stdout.write(
            f"backend {backend.alias}: {rewritten:,} job(s) re-encrypted with the first key{note}"
        )
        if left_old:
            self.stdout.write(
                f"backend {backend.alias}: {left_old:,} unfinished job(s) keep a sent message "
                "sealed with an older key (a sent message cannot change, and nothing reads it: "
                "the worker opens the job's re-encrypted row); each goes when its job finishes"
            )

    def _rotate_workflows(self, db: str, batch: int) -> None:
        """Durable workflows' step rows and sent events in ``db`` (docs/workflows.md)."""
        totals = {"step": 0, "event": 0}
        for what, read, rewritten in steprows.reseal(db, _text, batch):
            totals[what] += rewritten
            self.stdout.write(f"database {db}: {rewritten:,} {what} row(s) of {read:,} read…")
        if any(totals.values()):
            self.stdout.write(
                f"database {db}: {totals['step']:,} workflow step(s) and {totals['event']:,} "
                "event(s) re-encrypted with the first key"
            )
