"""The parent's end of a child's pipes: async frame reads and writes."""

from __future__ import annotations

import asyncio
import mmap
import sys
import time
from collections import deque
from collections.abc import Callable
from io import FileIO
from pathlib import Path
from typing import TYPE_CHECKING

from isoagent.parent.records.run_folder import write_all
from isoagent.protocol import (
    ChildFrame,
    FrameError,
    Heartbeat,
    HookCall,
    McpCall,
    ModelCall,
    ParentFrame,
    Result,
    TaskCall,
    encode_frame,
)
from isoagent.protocol.framing import (
    AMPLIFICATION,
    FrameAssembler,
    Spill,
    decoded_size,
    frame_kind,
)

if TYPE_CHECKING:
    from isoagent.parent.children.large_results import ResultFiles

# What the parent holds of a child's frames (a child is untrusted: it may send anything).
FRAME_IN_MEMORY = 32 << 20
"""The largest frame body of a child's the parent reads into memory: a ModelCall as large as
the Messages API takes (32 MB). Only a Result may be larger; it goes to the run folder as it
arrives (``large_results.py``)."""
DECODED_IN_MEMORY = 32 << 20
"""The most a frame may decode into: its body's bytes do not bound what its items become
(one byte, an empty list, decodes into eighty), so a body that could pass it is counted
item by item first (``decoded_size``). With its body and the gateway's one copy of it, a
child's frame takes the parent at most 64 MiB."""
SMALL_FRAME = 64 << 10  # a Hello, Progress or Heartbeat: an honest one has a few hundred bytes
WAITING_FRAMES = 64  # frames the parent has not taken yet: an honest child has one or two


class FrameRefused(FrameError):
    """A child's frames went past a bound of what the parent holds for it; the message
    says which. The child is ended: an error of its own, not a corrupt stream."""


def check_decoded(body: bytearray | mmap.mmap | memoryview, what: str = "") -> None:
    """Refuse (``FrameRefused``) a body that would decode into more than
    ``DECODED_IN_MEMORY`` bytes; ``what``: what it is, for the message (default: its
    frame's kind and length)."""
    if len(body) * AMPLIFICATION <= DECODED_IN_MEMORY:
        return  # none can: counting it would cost more than it tells
    if decoded_size(body, DECODED_IN_MEMORY) > DECODED_IN_MEMORY:
        what = what or f"a {frame_kind(body) or 'frame'} of {len(body)} bytes"
        raise FrameRefused(
            f"sent {what} that would take more than {DECODED_IN_MEMORY >> 20} MiB of the "
            "parent's memory decoded, a frame's bound"
        )


Queued = ChildFrame | asyncio.Future[ChildFrame] | Exception | None


class FrameInbox(asyncio.Protocol):
    """A child's frames, as the protocol of its stdout pipe: bytes go straight from the
    pipe into the frame they belong to, and decoded frames wait in a queue, so a consumer
    that stops waiting (a timeout) never cuts a frame in half. ``last_heard``: when the
    last bytes came (a Heartbeat is only that: it is not queued).

    Each frame is held to its kind's bound, and a child makes one call (``ModelCall``,
    ``McpCall``, ``HookCall``, ``TaskCall``) at a time, as its agent loop does: the next
    only once the parent ``answered`` the last. Past a bound the inbox ends with a
    ``FrameRefused``."""

    def __init__(self, grace: float = 1.0) -> None:
        self.last_heard = time.monotonic()
        # where a Result too large to hold goes: the supervisor's to set, before the Task
        self.results: ResultFiles | None = None
        self._frames = FrameAssembler(
            ChildFrame, in_memory=FRAME_IN_MEMORY, spill=self._spill, check=check_decoded
        )
        # a spooled frame is made in a thread: its future waits in its place
        self._queue: asyncio.Queue[Queued] = asyncio.Queue()
        self._grace = grace
        self._ended = False
        self._give_up: asyncio.TimerHandle | None = None
        self._calling = False  # a call of the child's waits for its answer

    async def next(self) -> ChildFrame | None:
        """The next frame; ``None`` at EOF, or when the child exited and its stdout did not
        end within ``grace`` seconds after (a grandchild may hold it open forever).
        A corrupt stream raises ``FrameError``. The end, once reached, is returned again."""
        item = await self._queue.get()
        if isinstance(item, asyncio.Future):
            try:
                return await item
            except FrameError as exc:
                self._end(exc)
                raise
        if item is None or isinstance(item, Exception):
            self._queue.put_nowait(item)
        if isinstance(item, Exception):
            raise item
        return item

    def child_exited(self) -> None:
        """Stop waiting for the pipe ``grace`` seconds from now."""
        loop = asyncio.get_running_loop()
        self._give_up = loop.call_later(self._grace, self._end, None)

    def unfinished(self) -> str:
        """The frame the child is in the middle of sending, for a message ("": none)."""
        if (got := self._frames.received()) is None:
            return ""
        length = self._frames.length
        where = "held in memory"
        if length > FRAME_IN_MEMORY:
            where = f"past {FRAME_IN_MEMORY >> 20} MiB a frame is kept on disk, not in memory"
        return f"inside a frame of {length} bytes: {got} came ({where})"

    def answered(self) -> None:
        """The parent answers the child's call (or cancels it): the child may call again."""
        self._calling = False

    def data_received(self, data: bytes) -> None:
        if self._ended:
            return
        self.last_heard = time.monotonic()
        try:
            for frame in self._frames.feed(data):
                frame = self._bounded(frame)  # type: ignore[arg-type]
                if not isinstance(frame, Heartbeat):
                    self._queue.put_nowait(frame)
        except FrameError as exc:
            self._end(exc)

    def _bounded(
        self, frame: ChildFrame | asyncio.Future[ChildFrame]
    ) -> ChildFrame | asyncio.Future[ChildFrame]:
        """``frame`` if it is within the child's bounds (a Result's texts cut to theirs);
        a ``FrameRefused`` naming the bound if not."""
        if self._queue.qsize() >= WAITING_FRAMES:
            raise FrameRefused(
                f"sent frames faster than the parent takes them ({WAITING_FRAMES} waiting)"
            )
        match frame:
            case ModelCall() | McpCall() | HookCall() | TaskCall():
                if self._calling:
                    raise FrameRefused(
                        f"sent a {type(frame).__name__} before its last call was answered: "
                        "a child makes one model, MCP or hook call at a time"
                    )
                self._calling = True
            case Result():
                if self.results is not None:
                    return self.results.bounded(frame)
            case asyncio.Future():
                pass  # a spooled Result, bounded as it is made
            case _ if (length := self._frames.length) > SMALL_FRAME:
                kind = type(frame).__name__
                raise FrameRefused(
                    f"sent a {kind} frame of {length} bytes: a {kind} may have "
                    f"{SMALL_FRAME >> 10} KiB"
                )
        return frame

    def _spill(self, length: int) -> Spill:
        if self.results is None:
            raise FrameRefused(
                f"sent a frame of {length} bytes before its Task: past "
                f"{FRAME_IN_MEMORY >> 20} MiB only a Result is taken"
            )
        return self.results.spool(length)

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
            self._frames.close()
            self._queue.put_nowait(item)


async def write_frame(stream: asyncio.StreamWriter, frame: ParentFrame) -> bool:
    """Send a frame; ``False`` when the child has closed its end (it is gone)."""
    try:
        stream.write(encode_frame(frame))
        await stream.drain()
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


LOG_CAP = 8 << 20  # bytes of a child's stderr log at most: its head and its tail


def log_cap(file_size_mb: int) -> int:
    """A child's log is no larger than a file it may write (``--max-file-size-mb``)."""
    return min(LOG_CAP, file_size_mb << 20) if file_size_mb > 0 else LOG_CAP


class _Tail:
    """The last ``size`` bytes of a stream (a few more, in the chunks they came in)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._chunks: deque[bytes] = deque()
        self._bytes = 0

    def add(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._bytes += len(chunk)
        while self._bytes - len(self._chunks[0]) >= self.size:
            self._bytes -= len(self._chunks.popleft())

    def data(self) -> bytes:
        return b"".join(self._chunks)[-self.size :]


class StderrLog:
    """Copies a child's stderr to its log file, at most ``cap`` bytes of it (the first and
    the last half, a marker between), and keeps the last lines for error messages."""

    def __init__(
        self,
        path: Path,
        keep_bytes: int = 4096,
        *,
        cap: int = LOG_CAP,
        create: Callable[[], FileIO] | None = None,
    ) -> None:
        """``create``: makes the log file (default: open ``path``)."""
        self.path = path
        self._tail = _Tail(keep_bytes)
        self._cap = cap
        self._create = create or (lambda: path.open("wb", buffering=0))

    async def drain(self, stream: asyncio.StreamReader) -> None:
        """Copy to EOF; the log is made with the first byte, so a child that says nothing
        leaves no empty file. A log that cannot be written (disk full) is reported once and
        the stream is still read to its end, so the child never blocks on a full pipe."""
        log: FileIO | None = None
        head_room = self._cap - self._cap // 2
        log_tail = _Tail(self._cap // 2)
        written = total = 0
        try:
            while chunk := await stream.read(1 << 16):
                if not total:
                    try:
                        log = self._create()
                    except OSError as exc:
                        self._report(exc)
                total += len(chunk)
                head = chunk[: max(head_room - written, 0)]
                if log is not None and head:
                    log = self._write(log, head)
                written += len(head)
                if len(head) < len(chunk):
                    log_tail.add(chunk[len(head) :])
                self._tail.add(chunk)
        finally:
            if log is not None and total > written:
                kept = log_tail.data()
                if cut := total - written - len(kept):
                    kept = f"\n[isoagent: {cut} bytes of this log cut]\n".encode() + kept
                log = self._write(log, kept)
            if log is not None:
                log.close()

    def _write(self, log: FileIO, data: bytes) -> FileIO | None:
        try:
            write_all(log, data)
        except OSError as exc:
            self._report(exc)
            log.close()
            return None
        return log

    def _report(self, exc: OSError) -> None:
        print(
            f"isoagent: cannot write child log {self.path}: {exc.strerror or exc}", file=sys.stderr
        )

    def last_lines(self, count: int = 8) -> list[str]:
        text = self._tail.data().decode("utf-8", "replace")
        return [line for line in text.splitlines() if line.strip()][-count:]
