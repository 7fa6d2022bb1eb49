"""Text from a model or a repository, made safe to print to a terminal.

A terminal acts on what it is sent: ESC sequences set the window title, write the
clipboard (OSC 52), move the cursor over earlier lines, and C1 controls (U+0080-U+009F)
do the same on some terminals; ``\\r`` and bidi overrides (U+202E...) make a line show
something other than what it says. Every string a model, a child or a repository
controls (an answer, a task's description, a tool's detail, an error quoting them, an
agent file's name and description) goes through here before a terminal sees it: each
such character is shown as its escape (``\\x1b``, ``\\u202e``), so nothing acts and nothing
hides.

Where the line is: stderr (progress, ``-v`` lines, errors) is for people and always
escaped. stdout is the payload: escaped only when it is a terminal (``for_stdout``);
a file or a pipe gets the text byte for byte, as scripts expect.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextvars import ContextVar

_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_CONTROLS = [*range(0x20), 0x7F, *range(0x80, 0xA0), *map(ord, _BIDI)]


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_TEXT = {code: _escape(code) for code in _CONTROLS if chr(code) not in "\n\t"}
_LINE = {**_TEXT, ord("\t"): " ", ord("\n"): "\\n"}


def terminal_line(text: str) -> str:
    """``text`` as one line that a terminal shows as it is: controls escaped, a tab a
    space, a line break ``\\n``."""
    return text.replace("\r\n", "\n").translate(_LINE)


def terminal_text(text: str) -> str:
    """``text`` (several lines) as a terminal shows it as it is: controls escaped, line
    breaks and tabs kept."""
    return text.replace("\r\n", "\n").translate(_TEXT)


def for_stdout(text: str, *, lines: bool = True) -> str:
    """``text`` for stdout: escaped (``terminal_text``, or ``terminal_line`` when not
    ``lines``) when stdout is a terminal, unchanged when it is a file or a pipe."""
    if not sys.stdout.isatty():
        return text
    return terminal_text(text) if lines else terminal_line(text)


# where ``warn`` says things instead of stderr: the Python API's calls set it (a library
# writes nothing to stderr unless asked: its notices go to the ``isoagent`` logger)
notices: ContextVar[Callable[[str], None] | None] = ContextVar("notices", default=None)


def warn(message: str) -> None:
    """``isoagent: MESSAGE`` on stderr, as one escaped line (or to ``notices``)."""
    if (elsewhere := notices.get()) is not None:
        elsewhere(message)
        return
    print(f"isoagent: {terminal_line(message)}", file=sys.stderr, flush=True)


def shorten(text: str, width: int, more: str = "...") -> str:
    """``text`` on one line (runs of whitespace one space), cut to ``width`` characters,
    ``more`` ending it where it was cut."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - len(more)] + more
