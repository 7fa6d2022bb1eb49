"""The parent's end of a child's pipes: async frame reads and writes."""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from io import FileIO
from pathlib import Path

from parent.child_process import ChildProcess
from protocol import ChildFrame, FrameError, decode_frame, encode_frame
from protocol.framing import HEADER, check_length


async def read_frame(stream: asyncio.StreamReader) -> ChildFrame | None:
    """The next frame, or ``None`` on a clean EOF between frames; ``FrameError`` otherwise."""
    try:
        header = await stream.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise FrameError("stream ended inside a frame header") from None
        return None
    length = check_length(header)
    try:
        body = await stream.readexactly(length)
    except asyncio.IncompleteReadError as exc:
        raise FrameError(
            f"stream ended inside a frame ({len(exc.partial)} of {length} bytes)"
        ) from None
    return decode_frame(body, ChildFrame)  # type: ignore[return-value]


async def next_frame(process: ChildProcess, grace: float = 1.0) -> ChildFrame | None:
    """The child's next frame; ``None`` at EOF, or once the child has exited and sent
    nothing more within ``grace`` seconds (a grandchild may hold its stdout open forever)."""
    read = asyncio.ensure_future(read_frame(process.stdout))
    try:
        while not read.done():
            if process.has_exited:
                done, _ = await asyncio.wait({read}, timeout=grace)
                return read.result() if done else None
            await asyncio.wait({read}, timeout=0.1)
        return read.result()
    finally:
        read.cancel()


async def write_frame(stream: asyncio.StreamWriter, frame: object) -> bool:
    """Send a frame; ``False`` when the child has closed its end (it is gone)."""
    try:
        stream.write(encode_frame(frame))  # type: ignore[arg-type]
        await stream.drain()
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


class StderrLog:
    """Copies a child's stderr to its log file and keeps the last lines for error messages."""

    def __init__(self, path: Path, keep_bytes: int = 4096) -> None:
        self.path = path
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        self._keep = keep_bytes

    async def drain(self, stream: asyncio.StreamReader) -> None:
        """Copy to EOF; a log that cannot be written (disk full) is reported once and the
        stream is still read to its end, so the child never blocks on a full pipe."""
        log: FileIO | None = None
        try:
            log = self.path.open("wb", buffering=0)
        except OSError as exc:
            self._report(exc)
        try:
            while chunk := await stream.read(1 << 16):
                if log is not None:
                    try:
                        view = memoryview(chunk)
                        while view:
                            view = view[log.write(view) :]
                    except OSError as exc:
                        self._report(exc)
                        log.close()
                        log = None
                self._tail.append(chunk)
                self._tail_size += len(chunk)
                while self._tail_size - len(self._tail[0]) >= self._keep:
                    self._tail_size -= len(self._tail.popleft())
        finally:
            if log is not None:
                log.close()

    def _report(self, exc: OSError) -> None:
        print(
            f"isoagent: cannot write child log {self.path}: {exc.strerror or exc}", file=sys.stderr
        )

    def last_lines(self, count: int = 8) -> list[str]:
        text = b"".join(self._tail)[-self._keep :].decode("utf-8", "replace")
        return [line for line in text.splitlines() if line.strip()][-count:]
