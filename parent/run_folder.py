"""Where a run keeps its transcripts and child logs: ``.isoagent/runs/<run-id>/``."""

from __future__ import annotations

import contextlib
import secrets
import sys
import time
from dataclasses import dataclass
from io import FileIO
from pathlib import Path

import msgspec

from isoagent.parent.events import Event

_encoder = msgspec.json.Encoder()


@dataclass
class RunFolder:
    path: Path
    run_id: str

    @classmethod
    def create(cls, base: Path) -> RunFolder:
        run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)
        path = base / run_id
        path.mkdir(parents=True)
        return cls(path, run_id)

    def child_stem(self, index: int, agent: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in agent)
        return self.path / f"child-{index:03d}-{safe}"

    def display(self, path: Path) -> str:
        """A path as the user will want to see it: relative to the cwd when below it."""
        cwd = Path.cwd()
        return str(path.relative_to(cwd)) if path.is_relative_to(cwd) else str(path)


def write_all(file: FileIO, data: bytes) -> None:
    """Write all of ``data`` to an unbuffered file, whose writes may be partial."""
    view = memoryview(data)
    while view:
        view = view[file.write(view) :]


class TranscriptWriter:
    """Appends events as JSONL lines, flushed one by one so a crash loses nothing written.

    A file that cannot be created or written (disk full) is reported once on stderr;
    the run goes on.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: FileIO | None = None
        self._end = 0  # end of the last complete line
        try:
            self._file = path.open("ab", buffering=0)
            self._end = self._file.tell()
        except OSError as exc:
            self._fail(exc)

    def __call__(self, event: Event) -> None:
        if self._file is None:
            return
        try:
            line = _encoder.encode(event) + b"\n"  # text that is not UTF-8 cannot be encoded
            write_all(self._file, line)
            self._end += len(line)
        except (OSError, UnicodeEncodeError) as exc:
            with contextlib.suppress(OSError):  # keep valid JSONL: drop the partial line
                self._file.truncate(self._end)
            self._fail(exc)

    def _fail(self, exc: OSError | UnicodeEncodeError) -> None:
        why = (exc.strerror if isinstance(exc, OSError) else None) or exc
        print(f"isoagent: cannot write transcript {self.path}: {why}", file=sys.stderr)
        self.close()

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
