"""The progress of ``isoagent batch`` on stderr: a bar, counts, rate, ETA, tokens, cost.

On a terminal the bar is a live line at its foot (``records/live_region.py``: cut to the
width, redrawn in place: ``batch: [#####.....] 12/40 done, 4 running, 1 failed, 0.8/s, ETA
35s, 12,345 tokens, $0.0412``), with a lasting line above it for each task that did not end
ok; elsewhere the children's own progress lines show (one a task), plus a line per invalid
input line. Both end with the same line (``isoagent: batch: 40/40 done, ...; <run folder>``),
after which nothing is drawn.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

from isoagent.parent.batch.input import label
from isoagent.parent.model.retry import WaitNotices
from isoagent.parent.records.events import TaskRecord
from isoagent.parent.records.figures import duration, tokens, usd
from isoagent.parent.records.terminal_text import terminal_line

if TYPE_CHECKING:
    from isoagent.parent.records.live_region import LiveRegion


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
        self.region: LiveRegion | None = None  # the bar, on a terminal, once the batch began
        self.closed = False

    def start(self, waits: WaitNotices, where: str = "") -> None:
        """The batch begins: its clock starts here, not while the CLI was still starting.
        ``waits`` are its model calls': the line says what they wait on; on a terminal
        each change is written above the line. ``where``: its run folder."""
        self.started = time.monotonic()
        self.waits = waits
        self.where = where
        if self.live:
            from isoagent.parent.records.live_region import LiveRegion

            waits.say = self._above
            self.region = LiveRegion(self.stream, lambda: [self.status()], more="")

    def _above(self, line: str) -> None:
        self._write(terminal_line(line))

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
                name = label(record.id, record.line)
                self._write(terminal_line(f"  {name} {record.status}: {record.error}"))
        self.draw()

    def status(self, *, final: bool = False) -> str:
        elapsed = time.monotonic() - self.started
        facts = [f"{self.done:,}/{self.total:,} done"]
        facts += [] if final else [f"{self.running:,} running"]
        facts.append(f"{self.failed:,} failed")
        if not final and self.ran:  # tasks a second, and when the rest may be done
            rate = self.ran / elapsed
            facts += [f"{rate:.2g}/s", f"ETA {duration((self.total - self.done) / rate)}"]
        facts += [duration(elapsed)] if final or not self.ran else []
        facts += [tokens(self.tokens), usd(self.cost)]
        waiting = self.waits.current
        head = "isoagent: batch:" if final else f"batch: {self._bar()}"
        return (
            f"{head} {', '.join(facts)}"
            + ("" if final or waiting is None else f"; {waiting.message}")
            + (f"; {self.where}" if final and self.where else "")
        )

    def _bar(self, width: int = 20) -> str:
        full = width * self.done // self.total if self.total else width
        return "[" + "#" * full + "." * (width - full) + "]"

    def draw(self) -> None:
        if self.region is not None:
            self.region.refresh()

    def close(self, note: str = "") -> None:
        """The final counts as a lasting line, with ``note`` appended; the bar is gone."""
        if self.closed:
            return
        self.closed = True
        last = self.status(final=True) + note
        if self.region is not None:
            self.region.close(last)
        else:
            self.stream.write(last + "\n")
            self.stream.flush()

    def _write(self, line: str) -> None:
        """A lasting line: above the bar on a terminal."""
        if self.region is not None:
            self.region.print(line)
        else:
            self.stream.write(line + "\n")
            self.stream.flush()
