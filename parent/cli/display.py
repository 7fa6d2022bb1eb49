"""The progress lines on stderr: the parent's model call and each running child.

On a terminal a live block at its foot (``records/live_region.py``) shows the parent
thinking (for how long, about how many tokens it has streamed) and each running child with
its current tool, a child's children indented under it; a line stays above the block when a
child ends, and at the end one line says the run's turns, children, tokens, cost and run
folder. Elsewhere it stays quiet: one line when a child ends (plus a line per tool call, and
the closing line, with ``-v``). Figures are said as ``records/figures.py`` says them.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

import msgspec

from isoagent.parent.cli.errors import stderr_lost
from isoagent.parent.model.stream import (
    ContentBlockDelta,
    InputJsonDelta,
    TextDelta,
    ThinkingDelta,
    decode,
)
from isoagent.parent.records.costs import Costs
from isoagent.parent.records.events import (
    ChildFinished,
    ChildProgress,
    ChildStarted,
    Event,
    MessageAdded,
    RunFinished,
)
from isoagent.parent.records.figures import duration, plural, tokens, usd
from isoagent.parent.records.terminal_text import terminal_line

if TYPE_CHECKING:
    from isoagent.parent.records.live_region import LiveRegion
    from isoagent.parent.session import Session

TICK = 0.5  # seconds between redraws of the live lines


@dataclass
class _Running:
    head: str  # "  [Explore] find test framework"
    tools: int = 0
    tool: str = ""  # the tool it runs now
    started: float = field(default_factory=time.monotonic)

    def line(self) -> str:
        now = f": {self.tool}" if self.tool else ""
        tools = plural(self.tools, "tool")
        return f"{self.head} ... {tools}, {duration(time.monotonic() - self.started)}{now}"


@dataclass
class _Thinking:
    """The parent's model call in flight."""

    started: float = field(default_factory=time.monotonic)
    characters: int = 0  # of text, thinking and tool input streamed so far

    def line(self) -> str:
        streamed = f", ~{tokens(self.characters // 4)}" if self.characters else ""
        return f"  parent: thinking {duration(time.monotonic() - self.started)}{streamed}"


class ProgressDisplay:
    """A sink of session events; if the stream goes away (a closed pipe) it stops writing."""

    def __init__(
        self,
        stream: TextIO | None = None,  # stderr
        *,
        live: bool | None = None,
        verbose: bool = False,
        closing: bool = True,
    ) -> None:
        """``closing``: a closing line at the end (a batch has its own)."""
        self._stream = stream  # None: sys.stderr when written to (above a batch's bar, rich's)
        self.lost = False  # nobody reads it any more
        self.live = (stream or sys.stderr).isatty() if live is None else live
        self.verbose = verbose
        self.closing = closing
        self.active: dict[str, _Running] = {}  # child id -> its live line
        self.thinking: _Thinking | None = None  # the parent's call in flight, on a terminal
        self.costs = Costs()  # every agent's tokens and cost, for the closing line
        self.turns = 0  # every agent's model turns (answers), as ``logs`` counts them
        self.children = 0
        self.asked_by: dict[str, str] = {}  # child id -> the child that started it ("": none)
        self.delegated = False  # a parent agent answered: the children were its
        self.region: LiveRegion | None = None  # the live block, once something is live
        self._ticker: asyncio.Task[None] | None = None

    def hear(self, child: str, data: bytes) -> None:
        """One streamed event of a model call (the gateway's ``listen``): the parent's
        words so far, for its thinking line."""
        if child or self.thinking is None:
            return
        try:
            event = decode(data)
        except msgspec.DecodeError:
            return
        match event:
            case ContentBlockDelta(
                delta=TextDelta(text=words)
                | ThinkingDelta(thinking=words)
                | InputJsonDelta(partial_json=words)
            ):
                self.thinking.characters += len(words)

    def __call__(self, event: Event) -> None:
        self.costs(event)
        if isinstance(event, MessageAdded):
            self._message(event)
        elif isinstance(event, ChildStarted):
            self.children += 1
            self.asked_by[event.child] = event.parent
            if self.live:
                self.active[event.child] = _Running(self._head(event))
                self._redraw()
                self._tick()
        elif isinstance(event, ChildProgress):
            progress = event.progress
            if shown := self.active.get(event.child):
                shown.tools = progress.tool_calls
                shown.tool = progress.tool if progress.event == "tool_start" else ""
                self._redraw()
            if self.verbose and progress.event == "tool_start":
                head = self._head(event)
                self._print(f"{head}: {progress.tool} {progress.detail}".rstrip())
        elif isinstance(event, ChildFinished):
            r = event.result
            facts = f"{plural(r.tool_calls, 'tool')}, {duration(r.duration)}"
            head = self._head(event)
            if r.status == "ok":
                line = f"{head} - done ({facts})"
            else:
                line = f"{head} - {r.status} ({facts}): {r.error}"
            self.active.pop(event.child, None)
            self._print(line)
        elif isinstance(event, RunFinished) and (self.live or self.verbose) and self.closing:
            self.thinking = None
            self.active.clear()
            self._close(self._closing(event))

    def _head(self, event: ChildStarted | ChildProgress | ChildFinished) -> str:
        """``  [Explore] find test framework``, two spaces more for each level of nesting."""
        indent = "  " * len(self._line_of(event.child))
        return f"{indent}[{event.agent}] {event.description}"

    def _line_of(self, child: str) -> tuple[str, ...]:
        """``child``'s ancestors and itself, from the parent's child down."""
        line = [child]
        while (asking := self.asked_by.get(line[-1], "")) and asking not in line:
            line.append(asking)
        return tuple(reversed(line))

    def _message(self, message: MessageAdded) -> None:
        """A parent's prompt or tool results go to the model: it thinks until it answers."""
        if message.role == "assistant" and message.usage is not None:
            self.turns += 1
        self.delegated = self.delegated or (message.role == "assistant" and not message.child)
        if message.child or not self.live:
            return
        self.thinking = _Thinking() if message.role == "user" else None
        self._redraw()
        if self.thinking is not None:
            self._tick()

    def _closing(self, final: RunFinished) -> str:
        """isoagent: 3 turns, 2 children, 1,234 tokens, $0.0123; .isoagent/runs/<id>"""
        facts = [plural(self.turns, "turn")]
        if self.delegated and self.children:  # not task's, whose one child is the main agent
            facts.append(plural(self.children, "child", "children"))
        facts += [tokens(self.costs.usage.total), usd(self.costs.total)]
        return f"isoagent: {', '.join(facts)}; {final.run_dir}"

    def _tick(self) -> None:
        """Keep the elapsed times moving while children run (needs the event loop)."""
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._tick_while_active())

    async def _tick_while_active(self) -> None:
        while self.active or self.thinking is not None:
            await asyncio.sleep(TICK)
            self._redraw()

    def follow(self, session: Session) -> None:
        """Show ``session``'s waits above the live lines and, on a terminal, how far the
        parent's streamed answers have come."""
        session.waits.say = self.note
        if self.live:
            session.gateway.listen(self.hear, children=False)

    def note(self, line: str) -> None:
        """A line of the parent's own (what model calls wait on), above the live block."""
        self._print(line)

    def _lines(self) -> list[str]:
        """The live block: the parent thinking, then each running child under its parent."""
        lines = [self.thinking.line()] if self.thinking is not None else []
        tree = sorted(self.active, key=self._line_of)
        return lines + [self.active[child].line() for child in tree]

    def _print(self, line: str) -> None:
        """A line that stays, written above the live block; a child's words in it escaped."""
        self._write(terminal_line(line))

    def _redraw(self) -> None:
        if self.live and (self.active or self.thinking is not None or self.region):
            self._write(None)

    def _close(self, line: str) -> None:
        """The closing line; the live block is gone for good."""
        self._write(terminal_line(line), last=True)

    def _write(self, line: str | None, *, last: bool = False) -> None:
        """``line`` above the live block (None: only a redraw of the block)."""
        if self.lost:
            return
        stream = self._stream or sys.stderr
        try:
            if self.live and self.region is None and not last:
                from isoagent.parent.records.live_region import LiveRegion

                self.region = LiveRegion(stream, self._lines)
            if self.region is None:
                if line is not None:
                    stream.write(line + "\n")
                    stream.flush()
            elif last:
                self.region.close(line or "")
            elif line is not None:
                self.region.print(line)
            else:
                self.region.refresh()
        except OSError as exc:  # nobody reads stderr any more: the run goes on without progress
            if self._stream is None:  # nor do later messages fail; it ends non-zero
                stderr_lost(exc)
            self.lost = True
