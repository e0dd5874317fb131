"""The worker's progress line in a log: written when something moved, never repeated idle."""

from __future__ import annotations

import io

from django_blamequeue.worker.consumer import Counters
from django_blamequeue.worker.progress import ProgressLine


def log_line(counters: Counters, in_flight: list[str]) -> tuple[ProgressLine, io.StringIO]:
    out = io.StringIO()
    line = ProgressLine(out, lambda: counters, lambda: in_flight[0], tty=False)
    return line, out


def test_an_idle_worker_writes_its_progress_line_once_not_at_every_interval() -> None:
    counters = Counters()
    line, out = log_line(counters, ["0/4"])
    counters.done = 5  # it worked, then went idle

    for _ in range(5):
        line.tick(force=True)

    lines = [text[9:] for text in out.getvalue().splitlines()]  # less "HH:MM:SS "
    assert len(lines) == 2
    assert lines[0].startswith("done 5 · retried 0 · failed 0 · in flight 0/4 · ")
    assert lines[1] == "done 5 · retried 0 · failed 0 · in flight 0/4 · 0.0/s"  # idle, once


def test_the_line_is_written_again_as_soon_as_a_count_or_the_slots_in_use_change() -> None:
    counters = Counters()
    in_flight = ["0/4"]
    line, out = log_line(counters, in_flight)
    line.tick(force=True)
    line.tick(force=True)  # idle: not repeated

    in_flight[0] = "1/4"
    line.tick(force=True)
    counters.failed = 1
    line.tick(force=True)

    lines = [text[9:] for text in out.getvalue().splitlines()]
    assert [text.split(" · ")[2:4] for text in lines] == [
        ["failed 0", "in flight 0/4"],
        ["failed 0", "in flight 1/4"],
        ["failed 1", "in flight 1/4"],
    ]


def test_a_terminal_redraws_the_line_in_place_whatever_it_says() -> None:
    out = io.StringIO()
    line = ProgressLine(out, lambda: Counters(), lambda: "0/1", tty=True)
    line.tick(force=True)
    line.tick(force=True)
    assert out.getvalue().count("\r\x1b[2K") == 2
