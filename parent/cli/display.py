"""The progress lines on stderr: one live line per running child.

On a terminal the lines are redrawn in place (and every half second, so the
elapsed time moves); elsewhere each child gets a plain line when it starts and
one when it ends (plus a line per tool call with ``-v``).
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from isoagent.parent.cli.errors import stderr_lost
from isoagent.parent.records.events import ChildFinished, ChildProgress, ChildStarted, Event
from isoagent.parent.records.terminal_text import terminal_line

TICK = 0.5  # seconds between redraws of the live lines


@dataclass
class _Running:
    head: str  # "  [Explore] find test framework"
    tools: int = 0
    started: float = field(default_factory=time.monotonic)

    def line(self) -> str:
        return f"{self.head} ... {self.tools} tools, {seconds(time.monotonic() - self.started)}"


class ProgressDisplay:
    """A sink of session events; if the stream goes away (a closed pipe) it stops writing."""

    def __init__(
        self,
        stream: TextIO | None = None,  # stderr
        *,
        live: bool | None = None,
        verbose: bool = False,
    ) -> None:
        stream = stream if stream is not None else sys.stderr
        self.stream: TextIO | None = stream  # None once nobody reads it
        self.live = stream.isatty() if live is None else live
        self.verbose = verbose
        self.active: dict[str, _Running] = {}  # child id -> its live line
        self._drawn = 0
        self._ticker: asyncio.Task[None] | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, ChildStarted):
            running = _Running(terminal_line(f"  [{event.agent}] {event.description}"))
            if self.live:
                self.active[event.child] = running
                self._redraw()
                self._tick()
            else:
                self._print(f"{running.head} ...")
        elif isinstance(event, ChildProgress):
            progress = event.progress
            if shown := self.active.get(event.child):
                shown.tools = progress.tool_calls
                self._redraw()
            if self.verbose and progress.event == "tool_start":
                head = f"  [{event.agent}] {event.description}"
                self._print(f"{head}: {progress.tool} {progress.detail}".rstrip())
        elif isinstance(event, ChildFinished):
            r = event.result
            facts = f"{r.tool_calls} tools, {seconds(r.duration)}"
            head = f"  [{event.agent}] {event.description}"
            if r.status == "ok":
                line = f"{head} - done ({facts})"
            else:
                line = f"{head} - {r.status} ({facts}): {r.error}"
            self.active.pop(event.child, None)
            self._print(line)

    def _tick(self) -> None:
        """Keep the elapsed times moving while children run (needs the event loop)."""
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._tick_while_active())

    async def _tick_while_active(self) -> None:
        while self.active:
            await asyncio.sleep(TICK)
            self._redraw()

    def note(self, line: str) -> None:
        """A line of the parent's own (what model calls wait on), above the live block."""
        self._print(line)

    def _print(self, line: str) -> None:
        """A line that stays, written above the live block; a child's words in it escaped."""
        self._redraw(terminal_line(line) + "\n")

    def _redraw(self, above: str = "") -> None:
        """Clear the live block, write ``above``, draw the live block again."""
        if self.stream is None:
            return
        text = f"\x1b[{self._drawn}F\x1b[J" if self._drawn else ""
        text += above
        if self.live:
            text += "".join(running.line() + "\n" for running in self.active.values())
        try:
            self.stream.write(text)
            self.stream.flush()
        except OSError as exc:  # nobody reads stderr any more: the run goes on without progress
            if self.stream is sys.stderr:  # nor do later messages fail; it ends non-zero
                stderr_lost(exc)
            self.stream = None
        self._drawn = len(self.active) if self.live else 0


def seconds(value: float) -> str:
    """3.2s, or 45ms below a tenth of a second (where 0.0s would say nothing)."""
    return f"{value:.1f}s" if value >= 0.1 else f"{value * 1000:.0f}ms"
