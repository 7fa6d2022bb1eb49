"""The parent's end of a child's pipes: async frame reads and writes."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import deque
from io import FileIO
from pathlib import Path

from isoagent.parent.run_folder import write_all
from isoagent.protocol import ChildFrame, FrameError, Heartbeat, ParentFrame, encode_frame
from isoagent.protocol.framing import FrameAssembler


class FrameInbox(asyncio.Protocol):
    """A child's frames, as the protocol of its stdout pipe: bytes go straight from the
    pipe into the frame they belong to, and decoded frames wait in a queue, so a consumer
    that stops waiting (a timeout) never cuts a frame in half. ``last_heard``: when the
    last bytes came (a Heartbeat is only that: it is not queued)."""

    def __init__(self, grace: float = 1.0) -> None:
        self.last_heard = time.monotonic()
        self._frames = FrameAssembler(ChildFrame)
        self._queue: asyncio.Queue[ChildFrame | Exception | None] = asyncio.Queue()
        self._grace = grace
        self._ended = False
        self._give_up: asyncio.TimerHandle | None = None

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

    def child_exited(self) -> None:
        """Stop waiting for the pipe ``grace`` seconds from now."""
        loop = asyncio.get_running_loop()
        self._give_up = loop.call_later(self._grace, self._end, None)

    def data_received(self, data: bytes) -> None:
        if self._ended:
            return
        self.last_heard = time.monotonic()
        try:
            for frame in self._frames.feed(data):
                if not isinstance(frame, Heartbeat):
                    self._queue.put_nowait(frame)  # type: ignore[arg-type]
        except FrameError as exc:
            self._end(exc)

    def eof_received(self) -> None:
        try:
            self._frames.end()
        except FrameError as exc:
            self._end(exc)
        self._end(None)

    def connection_lost(self, exc: Exception | None) -> None:
        """The pipe is closed: at its end, or by ``ChildProcess.close_pipes``."""
        if self._give_up is not None:
            self._give_up.cancel()
        self._end(exc)  # an OSError reading the pipe is the consumer's

    def _end(self, item: Exception | None) -> None:
        if not self._ended:
            self._ended = True
            self._queue.put_nowait(item)


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
                        write_all(log, chunk)
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
