"""The progress lines on stderr: one live line per running child.

On a terminal the lines are redrawn in place; elsewhere each child gets a
plain line when it starts and one when it ends (plus tool lines with ``-v``).
"""

from __future__ import annotations

import sys
from typing import TextIO

from parent.events import ChildFinished, ChildProgress, ChildStarted, Event


class ProgressDisplay:
    def __init__(
        self, stream: TextIO = sys.stderr, *, live: bool | None = None, verbose: bool = False
    ) -> None:
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self.verbose = verbose
        self.active: dict[str, str] = {}  # child id -> its current line
        self._drawn = 0

    def __call__(self, event: Event) -> None:
        if isinstance(event, ChildStarted):
            self._show(event.child, f"  [{event.agent}] {event.description} ...")
        elif isinstance(event, ChildProgress):
            p = event.progress
            head = f"  [{event.agent}] {event.description}"
            if self.verbose and p.event == "tool_start":
                self._print(f"{head}: {p.tool} {p.detail}".rstrip())
            if self.live:
                self.active[event.child] = f"{head} ... {p.tool_calls} tools, {seconds(p.elapsed)}"
                self._redraw()
        elif isinstance(event, ChildFinished):
            r = event.result
            facts = f"{r.tool_calls} tools, {seconds(r.duration)}"
            if r.status == "ok":
                line = f"  [{event.agent}] {event.description} - done ({facts})"
            else:
                line = f"  [{event.agent}] {event.description} - {r.status} ({facts}): {r.error}"
            self.active.pop(event.child, None)
            self._print(line)

    def _show(self, child: str, line: str) -> None:
        if self.live:
            self.active[child] = line
            self._redraw()
        else:
            self._print(line)

    def _print(self, line: str) -> None:
        """A line that stays, written above the live block."""
        if self.live:
            self._clear()
            self.stream.write(line + "\n")
            self._redraw()
        else:
            self.stream.write(line + "\n")
            self.stream.flush()

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def _redraw(self) -> None:
        self._clear()
        for line in self.active.values():
            self.stream.write(line + "\n")
        self._drawn = len(self.active)
        self.stream.flush()


def seconds(value: float) -> str:
    """3.2s, or 45ms below a tenth of a second (where 0.0s would say nothing)."""
    return f"{value:.1f}s" if value >= 0.1 else f"{value * 1000:.0f}ms"
