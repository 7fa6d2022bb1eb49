"""The progress of ``isoagent batch`` on stderr: counts, elapsed time, tokens.

On a terminal one status line is redrawn in place, with a lasting line above it
for each task that did not end ok; elsewhere the children's own progress lines
show, plus a line per invalid input line and the counts at the end.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from isoagent.parent.batch.input import label
from isoagent.parent.model.retry import WaitNotices
from isoagent.parent.records.events import TaskRecord
from isoagent.parent.records.terminal_text import terminal_line

_CLEAR = "\r\x1b[K"


class BatchDisplay:
    def __init__(self, total: int, stream: TextIO | None = None, *, live: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr  # today's, not import time's
        self.live = live
        self.total = total
        self.done = self.running = self.failed = self.tokens = 0
        self.started = time.monotonic()
        self.waits = WaitNotices()

    def start(self, waits: WaitNotices) -> None:
        """The batch begins: its clock starts here, not while the CLI was still starting.
        ``waits`` are its model calls': the line says what they wait on; on a terminal
        each change is written above the line."""
        self.started = time.monotonic()
        self.waits = waits
        if self.live:
            waits.say = self._above

    def _above(self, line: str) -> None:
        self.stream.write(f"{_CLEAR}{terminal_line(line)}\n")
        self.draw()

    def task_started(self) -> None:
        self.running += 1
        self.draw()

    def task_finished(self, record: TaskRecord, *, ran: bool = True) -> None:
        """Count a record; ``ran`` is false for an invalid line that never started."""
        self.running -= ran
        self.done += 1
        self.tokens += record.tokens.total
        if record.status != "ok":
            self.failed += 1
            if self.live or not ran:  # elsewhere the child's own progress line says it
                clear = _CLEAR if self.live else ""
                name = label(record.id, record.line)
                line = terminal_line(f"  {name} {record.status}: {record.error}")
                self.stream.write(f"{clear}{line}\n")
        self.draw()

    def status(self, *, final: bool = False) -> str:
        running = "" if final else f", {self.running} running"
        waiting = self.waits.current
        return (
            f"batch: {self.done}/{self.total} done{running}, {self.failed} failed, "
            f"{_duration(time.monotonic() - self.started)}, {_count(self.tokens)} tokens"
            + ("" if final or waiting is None else f"; {waiting.message}")
        )

    def draw(self) -> None:
        if self.live:
            self.stream.write(_CLEAR + self.status())
            self.stream.flush()

    def close(self, note: str = "") -> None:
        """The final counts as a lasting line, with ``note`` appended."""
        prefix = _CLEAR if self.live else "isoagent: "
        self.stream.write(f"{prefix}{self.status(final=True)}{note}\n")
        self.stream.flush()


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def _count(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 10_000 else str(n)
