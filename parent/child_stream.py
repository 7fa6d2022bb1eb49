"""The parent's end of a child's pipes: async frame reads and writes."""

from __future__ import annotations

import asyncio
import math
import sys
from collections import deque
from io import FileIO
from pathlib import Path

from parent.child_process import ChildProcess
from protocol import ChildFrame, FrameError, ParentFrame, decode_frame, encode_frame
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


class FrameInbox:
    """A child's frames, read by one task for the child's whole life, so a consumer that
    stops waiting (a timeout) never cuts a frame in half: a later ``next`` gets it whole."""

    def __init__(self, process: ChildProcess, grace: float = 1.0) -> None:
        self._queue: asyncio.Queue[ChildFrame | Exception | None] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read(process.stdout))
        self._watcher = asyncio.create_task(self._watch(process, grace))

    async def next(self) -> ChildFrame | None:
        """The next frame; ``None`` at EOF, or when the child exited and its stdout did not
        end within ``grace`` seconds after (a grandchild may hold it open forever).
        A corrupt stream raises ``FrameError``. The end, once reached, is returned again."""
        item = await self._queue.get()
        if item is None or isinstance(item, Exception):
            self._queue.put_nowait(item)
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        """Stop reading: the child is done."""
        self._reader.cancel()
        self._watcher.cancel()

    async def _read(self, stream: asyncio.StreamReader) -> None:
        try:
            while (frame := await read_frame(stream)) is not None:
                self._queue.put_nowait(frame)
        except Exception as exc:  # FrameError, or an OSError reading the pipe: the consumer's
            self._queue.put_nowait(exc)
        else:
            self._queue.put_nowait(None)

    async def _watch(self, process: ChildProcess, grace: float) -> None:
        await process.wait_exit(math.inf)
        await asyncio.wait({self._reader}, timeout=grace)
        if not self._reader.done():
            self._reader.cancel()
            self._queue.put_nowait(None)


async def write_frame(stream: asyncio.StreamWriter, frame: ParentFrame) -> bool:
    """Send a frame; ``False`` when the child has closed its end (it is gone)."""
    try:
        stream.write(encode_frame(frame))
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
