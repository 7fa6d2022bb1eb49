"""The progress of ``isoagent batch`` on stderr: a bar, counts, rate, ETA, tokens, cost.

On a terminal one status line is redrawn in place (``[#####.....] 12/40 done, 4 running,
1 failed, 0.8/s, ETA 35s, 12.3k tokens, $0.0412``), with a lasting line above it for each
task that did not end ok; elsewhere the children's own progress lines show (one a task),
plus a line per invalid input line and the counts at the end, with the run folder.
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
        self.done = self.running = self.failed = self.tokens = self.ran = 0
        self.cost = 0.0
        self.started = time.monotonic()
        self.waits = WaitNotices()
        self.where = ""  # the run folder

    def start(self, waits: WaitNotices, where: str = "") -> None:
        """The batch begins: its clock starts here, not while the CLI was still starting.
        ``waits`` are its model calls': the line says what they wait on; on a terminal
        each change is written above the line. ``where``: its run folder."""
        self.started = time.monotonic()
        self.waits = waits
        self.where = where
        if self.live:
            waits.say = self._above

    def _above(self, line: str) -> None:
        self.stream.write(f"{_CLEAR}{terminal_line(line)}\n")
        self.draw()

    def task_started(self) -> None:
        self.running += 1
        self.draw()

    def task_finished(self, record: TaskRecord, *, ran: bool = True, counted: bool = True) -> None:
        """Count a record; ``ran`` is false for an invalid line that never started,
        ``counted`` for a task cut short that will run again (the budget ended it)."""
        self.running -= ran
        self.tokens += record.tokens.total
        self.cost += record.cost_usd
        if not counted:
            self.draw()
            return
        self.done += 1
        self.ran += ran
        if record.status != "ok":
            self.failed += 1
            if self.live or not ran:  # elsewhere the child's own progress line says it
                clear = _CLEAR if self.live else ""
                name = label(record.id, record.line)
                line = terminal_line(f"  {name} {record.status}: {record.error}")
                self.stream.write(f"{clear}{line}\n")
        self.draw()

    def status(self, *, final: bool = False) -> str:
        elapsed = time.monotonic() - self.started
        facts = [f"{self.done}/{self.total} done"]
        facts += [] if final else [f"{self.running} running"]
        facts.append(f"{self.failed} failed")
        if not final and self.ran:  # tasks a second, and when the rest may be done
            rate = self.ran / elapsed
            facts += [f"{rate:.2g}/s", f"ETA {_duration((self.total - self.done) / rate)}"]
        facts += [_duration(elapsed)] if final or not self.ran else []
        facts += [f"{_count(self.tokens)} tokens", f"${self.cost:.4f}"]
        waiting = self.waits.current
        head = "batch:" if final or not self.live else f"batch: {self._bar()}"
        return (
            f"{head} {', '.join(facts)}"
            + ("" if final or waiting is None else f"; {waiting.message}")
            + (f"; {self.where}" if final and self.where else "")
        )

    def _bar(self, width: int = 20) -> str:
        full = width * self.done // self.total if self.total else width
        return "[" + "#" * full + "." * (width - full) + "]"

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
