"""A terminal a test can look at as a person would: a pty of a given size whose output is read
into a terminal emulator's screen (pyte), scrolled-off rows kept."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios
import threading
from pathlib import Path

import pyte

from tests.support.cli import ISOAGENT


class Terminal:
    """A ``columns`` x ``rows`` terminal: what the processes write to it, as raw text (to wait
    for) and as the screen it makes (``lines``)."""

    def __init__(self, columns: int = 80, rows: int = 24) -> None:
        self.columns, self.rows = columns, rows
        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.screen = _Screen(columns, rows, history=10_000)
        self.stream = pyte.ByteStream(self.screen)
        self.text = ""
        self.changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the last writer closed it
                return
            if not chunk:
                return
            with self.changed:
                self.stream.feed(chunk)
                self.text += chunk.decode(errors="replace")
                self.changed.notify_all()

    def resize(self, columns: int, rows: int) -> None:
        """The terminal made ``columns`` x ``rows`` (as a window is), its rows cut, not
        reflowed (as xterm does)."""
        with self.changed:
            fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
            self.screen.resize(rows, columns)
            self.columns, self.rows = columns, rows

    def wait_for(self, words: str, seconds: float = 60, *, times: int = 1) -> bool:
        """Whether ``words`` were written (``times`` times) within ``seconds``."""
        with self.changed:
            return self.changed.wait_for(lambda: self.text.count(words) >= times, seconds)

    def run(
        self,
        args: list[str],
        env: dict[str, str],
        cwd: Path,
        *,
        stdout: bool = True,
        stdin: int | None = subprocess.DEVNULL,
        input: bytes | None = None,
        code: int = 0,
    ) -> str:
        """``isoagent ARGS`` on this terminal (stderr, and stdout unless ``stdout`` is
        False, when its stdout is returned); it must exit ``code``."""
        env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
        env["TERM"] = "xterm-256color"
        done = subprocess.run(
            [*ISOAGENT, *args], env=env, cwd=cwd, stdin=None if input else stdin,
            input=input, stdout=self.slave if stdout else subprocess.PIPE, stderr=self.slave,
            timeout=180,
        )  # fmt: skip
        self.close()
        assert done.returncode == code, "\n".join(self.lines())
        return "" if stdout else done.stdout.decode()

    def close(self) -> None:
        """No more writers: read what is left."""
        os.close(self.slave)
        self._reader.join(timeout=30)

    def lines(self) -> list[str]:
        """Every line the terminal shows or scrolled off, top to bottom, a line the terminal
        wrapped as one, blank ones at the end dropped."""
        with self.changed:
            screen = self.screen
            rows = [*screen.history.top, *(screen.buffer[y] for y in range(screen.lines))]
            lines, line = [], ""
            for row in rows:
                line += "".join(row[x].data for x in range(self.columns))
                if not getattr(row, "wrapped", False):
                    lines.append(line.rstrip())
                    line = ""
        while lines and not lines[-1]:
            lines.pop()
        return lines


class _Screen(pyte.HistoryScreen):  # type: ignore[misc]
    """pyte's screen, which also marks the rows the terminal wrapped into the next."""

    def draw(self, data: str) -> None:
        for char in data:
            if self.cursor.x == self.columns and pyte.modes.DECAWM in self.mode:
                self.buffer[self.cursor.y].wrapped = True
            super().draw(char)

    def erase_in_line(self, how: int = 0, private: bool = False) -> None:
        super().erase_in_line(how, private)
        if how in (0, 2):
            self.buffer[self.cursor.y].wrapped = False

    def erase_in_display(self, how: int = 0, *args: object, **kwargs: object) -> None:
        super().erase_in_display(how, *args, **kwargs)
        erased = range(self.cursor.y, self.lines) if how == 0 else range(self.lines)
        for y in erased if how in (0, 2, 3) else ():
            self.buffer[y].wrapped = False


def screen_of(text: str, columns: int = 80, rows: int = 24) -> list[str]:
    """The lines a ``columns`` x ``rows`` terminal shows after ``text`` (what a display wrote
    to a stream as if it were one), as ``Terminal.lines``."""
    terminal = Terminal.__new__(Terminal)
    terminal.columns = columns
    terminal.screen = _Screen(columns, rows, history=10_000)
    terminal.changed = threading.Condition()
    pyte.Stream(terminal.screen).feed(text.replace("\n", "\r\n"))
    return terminal.lines()
