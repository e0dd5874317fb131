"""The free texts a job stores — its error and traceback — made storable by every engine.

A handler's exception is its own object: its message may hold NUL (PostgreSQL refuses NUL in
``text``; a refused ack would fail the whole batch), a lone surrogate (no UTF-8 form: no
driver can send it) or ten megabytes. ``storable`` escapes the first two and bounds the
length, so an error text can never stop an ack. ``records.Transition`` applies it to every
transition a worker builds, on every backend.
"""

from __future__ import annotations

#: The longest error message stored (characters): the exception's type and message.
MAX_ERROR = 4096
#: The longest traceback stored (characters): its head (the outer frames) and its tail (the
#: innermost frames and the exception line) are kept, the middle is cut.
MAX_TRACEBACK = 65536


def storable(text: str, limit: int, *, keep_tail: bool = False) -> str:
    """``text`` with NUL written as ``\\x00``, lone surrogates as ``\\udcXX``, and at most
    ``limit`` characters: cut at the end, or (``keep_tail``) in the middle, with a note of
    how much was cut. Never raises for a ``str``."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= limit:
        return text
    note = _note(len(text) - limit, keep_tail)
    for _ in range(2):  # the note's length depends on the count it states
        kept = max(0, limit - len(note))
        note = _note(len(text) - kept, keep_tail)
    kept = max(0, limit - len(note))
    if not keep_tail:
        return (text[:kept] + note)[:limit]
    head = kept // 4
    return (text[:head] + note + text[len(text) - (kept - head) :])[-limit:]


def _note(cut: int, middle: bool) -> str:
    return f"\n… [{cut:,} characters cut] …\n" if middle else f"… [{cut:,} more characters]"


def error_text(text: str | None) -> str | None:
    return None if text is None else storable(str(text), MAX_ERROR)


def traceback_text(text: str | None) -> str | None:
    return None if text is None else storable(str(text), MAX_TRACEBACK, keep_tail=True)
