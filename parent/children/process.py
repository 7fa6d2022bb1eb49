"""A running child, however it was started (exec'd, or forked by the fork server).

The parent makes the child's three pipes itself, hands the child its ends, and
wraps its own ends as asyncio streams; the child's exit arrives as a future.
The supervisor only ever sees a ``ChildProcess``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Sequence
from io import FileIO

from isoagent.parent.children.connection import FrameInbox, write_frame
from isoagent.protocol import ParentFrame

STDOUT_PIPE_SIZE = 1 << 20  # a larger pipe measurably raises frame throughput


def widen(pipe: int) -> None:
    """Give a pipe ``STDOUT_PIPE_SIZE`` bytes of buffer, where the system allows it."""
    with contextlib.suppress(OSError):  # above /proc/sys/fs/pipe-max-size: keep the default
        fcntl.fcntl(pipe, fcntl.F_SETPIPE_SZ, STDOUT_PIPE_SIZE)


class ChildPipes:
    """A child's stdin, stdout and stderr pipes: its ends to hand over, the parent's to keep."""

    def __init__(self) -> None:
        self._fds: list[int] = []
        try:
            stdin_read, stdin_write = self._pipe()
            stdout_read, stdout_write = self._pipe()
            stderr_read, stderr_write = self._pipe()
        except OSError:
            self.close()
            raise
        widen(stdout_write)
        self.child_ends = [stdin_read, stdout_write, stderr_write]
        self.parent_ends = [stdin_write, stdout_read, stderr_read]

    def _pipe(self) -> tuple[int, int]:
        read, write = os.pipe()  # close-on-exec: nothing else the parent starts inherits them
        self._fds += [read, write]
        return read, write

    def close_child_ends(self) -> None:
        """Once the child holds its ends the parent must not, or it never sees EOF."""
        self._close(self.child_ends)

    def close(self) -> None:
        self._close(list(self._fds))

    def _close(self, fds: Sequence[int]) -> None:
        for fd in fds:
            if fd in self._fds:
                self._fds.remove(fd)
                os.close(fd)

    def take_parent_ends(self) -> list[FileIO]:
        """The parent's ends as files; from here on whoever holds the files closes them."""
        files = [FileIO(fd, mode) for fd, mode in zip(self.parent_ends, "wrr", strict=True)]
        self._fds = [fd for fd in self._fds if fd not in self.parent_ends]
        return files


class ChildProcess:
    """A started child: its pid, the parent's ends of its pipes, and its exit."""

    def __init__(
        self,
        pid: int,
        stdin: asyncio.StreamWriter,
        frames: FrameInbox,
        stderr: asyncio.StreamReader,
        exit: asyncio.Future[int | None],
        transports: Sequence[asyncio.BaseTransport],
    ) -> None:
        self.pid = pid
        self.stdin = stdin
        self.frames = frames  # what it writes on stdout
        self.stderr = stderr
        self._exit = exit  # its returncode; None when it ended unseen (the fork server died)
        self._transports = transports

    @property
    def has_exited(self) -> bool:
        return self._exit.done()

    @property
    def returncode(self) -> int | None:
        """As in subprocess: negative when a signal killed it; None while it runs."""
        return self._exit.result() if self._exit.done() else None

    async def wait_exit(self, seconds: float) -> bool:
        """Whether the child exits within ``seconds`` (its pipes may stay open after it:
        a grandchild can hold them forever)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._exit), seconds)
        return self._exit.done()

    async def answer(self, frame: ParentFrame) -> bool:
        """Answer the call the child is making (or Cancel it): it may make the next one
        (``FrameInbox`` takes one at a time). False when the child has closed its end."""
        self.frames.answered()
        return await write_frame(self.stdin, frame)

    def close_pipes(self) -> None:
        """Close the parent's ends now, not at exit when the loop is gone (a traceback)."""
        for transport in self._transports:
            transport.close()


async def attach(pid: int, pipes: ChildPipes, exit: asyncio.Future[int | None]) -> ChildProcess:
    """Wrap the parent's ends of a started child's pipes: its stdout as a ``FrameInbox``,
    its stdin and stderr as asyncio streams."""
    loop = asyncio.get_running_loop()
    files = pipes.take_parent_ends()
    stdin_file, stdout_file, stderr_file = files
    transports: list[asyncio.BaseTransport] = []
    frames, stderr = FrameInbox(), asyncio.StreamReader()
    try:
        stdout_transport, _ = await loop.connect_read_pipe(lambda: frames, stdout_file)
        transports.append(stdout_transport)
        stderr_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stderr), stderr_file
        )
        transports.append(stderr_transport)
        protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader())
        write_transport, _ = await loop.connect_write_pipe(lambda: protocol, stdin_file)
        transports.append(write_transport)
    except BaseException:
        for transport in transports:
            transport.close()  # unregisters its pipe at once
        for file in files:
            file.close()
        raise
    writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
    exit.add_done_callback(lambda _: frames.child_exited())
    return ChildProcess(pid, writer, frames, stderr, exit, transports)
