"""A block of live lines at the foot of a terminal, redrawn in place, lasting lines above it.

rich's ``Live`` draws it, on the terminal measured at every redraw (so a resize is followed
at the next one), and moves the cursor over exactly the rows it drew. The block is cut here
to what fits: at most height-1 rows (the last says ``… and 18 more running``), each row cut
to the width, so no row ever wraps and none is left behind. While it is drawn, whatever else
the process writes to stderr goes above it; a line for stdout on the same terminal is written
with the block taken away (``paused``). ``close`` writes a last line and takes the block away
for good: nothing is drawn after it.

rich is imported only when a block is drawn (stderr is a terminal): elsewhere it is not
needed, nor its import paid.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult
    from rich.text import Text

_active: list[LiveRegion] = []  # the block on the terminal now (one a process)


class LiveRegion:
    """``lines()`` gives the block's lines at each redraw, all of them: what does not fit is
    counted in the last row, ``… and N more`` ``more``."""

    def __init__(
        self, stream: TextIO, lines: Callable[[], list[str]], *, more: str = "running"
    ) -> None:
        from rich.console import Console
        from rich.live import Live

        self.lines = lines
        self.more = more
        self.console = Console(
            file=stream,
            force_terminal=True,
            highlight=False,
            markup=False,
            emoji=False,
            soft_wrap=True,
        )
        self.live = Live(
            console=self.console,
            auto_refresh=False,  # the owner's ticker refreshes it, on its event loop
            transient=True,
            redirect_stdout=False,
            redirect_stderr=stream is sys.__stderr__ or stream is sys.stderr,
            get_renderable=lambda: _Block(self),
        )
        self.closed = False
        self.console.size = self.measure()
        self.live.start(refresh=True)
        _active.append(self)
        atexit.register(self.close)

    def block(self, width: int, height: int) -> list[str]:
        """The rows to draw for a terminal of ``width`` x ``height``."""
        lines = self.lines()
        rows = max(height - 1, 1)
        if len(lines) > rows:
            hidden = len(lines) - rows + 1
            lines = [*lines[: rows - 1], f"  … and {hidden:,} more {self.more}"]
        return [_cut(line, width) for line in lines]

    def refresh(self) -> None:
        if not self.closed:
            self.console.size = self.measure()
            self.live.refresh()

    def measure(self) -> tuple[int, int]:
        """The size of the terminal the block is drawn on (80x24 if it is not one)."""
        try:
            size = os.get_terminal_size(self.console.file.fileno())
        except (OSError, ValueError, AttributeError):  # not a terminal: a test's StringIO
            return 80, 24
        return size.columns or 80, size.lines or 24

    def print(self, line: str) -> None:
        """A lasting line, above the block (the terminal wraps it if it is long)."""
        if self.closed:
            self.console.file.write(line + "\n")
            self.console.file.flush()
            return
        self.console.size = self.measure()
        self.console.print(_text(line), soft_wrap=True)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The block taken away while the body writes elsewhere to the terminal."""
        if self.closed:
            yield
            return
        self.live.stop()
        try:
            yield
        finally:
            self.live.start(refresh=True)

    def close(self, last: str = "") -> None:
        """Write ``last`` (if any) and take the block away; nothing is drawn after."""
        if self.closed:
            return
        if last:
            self.console.print(_text(last), soft_wrap=True)
        self.closed = True
        atexit.unregister(self.close)
        if self in _active:
            _active.remove(self)
        self.live.stop()


class _Block:
    """What ``Live`` draws: the region's rows, measured against the console each time."""

    def __init__(self, region: LiveRegion) -> None:
        self.region = region

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.text import Text

        rows = self.region.block(options.max_width, console.size.height)
        yield Text("\n".join(rows), no_wrap=True, overflow="crop", end="")


def _text(line: str) -> Text:
    from rich.text import Text

    return Text(line)


def _cut(line: str, width: int) -> str:
    """``line`` in at most ``width`` cells, ``…`` where it was cut."""
    text = _text(line)
    if text.cell_len > width:
        text.truncate(width, overflow="ellipsis")
    return text.plain


@contextlib.contextmanager
def paused(stream: IO[bytes] | IO[str]) -> Iterator[None]:
    """Writing to ``stream``: if it is the terminal a live block is on, the block is taken
    away meanwhile, so that the line is not written into it."""
    if not _active or not _isatty(stream):
        yield
        return
    with _active[-1].paused():
        yield


def _isatty(stream: IO[bytes] | IO[str]) -> bool:
    try:
        return stream.isatty()
    except (OSError, ValueError):
        return False
