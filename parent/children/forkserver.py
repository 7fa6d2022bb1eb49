"""The parent's side of the fork server (``child/forkserver.py``).

Launched as a session opens (by the CLI before it imports the SDK, so the two
overlap), it forks each child from a process that has already imported
everything a child needs: a few milliseconds from request to ``Hello`` instead
of an interpreter start. Requests may overlap (a batch's first wave asks for
many children at once); a reader task takes the server's answers (``Spawned``,
``SpawnFailed``, each naming its request) and every forked child's exit
(``Exited``). If the server cannot start or dies, ``spawn`` raises
``ForkServerUnavailable`` from then on (after one warning line on stderr) and
the caller starts children the plain way.

The server is a plain ``subprocess.Popen``, not an asyncio subprocess: asyncio's
child watcher logs a warning on stderr when a loop closes before its process
has exited, which an interrupted CLI cannot rule out.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
import subprocess
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

import msgspec

from isoagent.child.agent.process_tree import DEAD, STATE, stat_fields
from isoagent.parent.children.process import ChildPipes, ChildProcess, attach
from isoagent.protocol.forkserver import (
    MAX_MESSAGE,
    Exited,
    Program,
    Spawn,
    Spawned,
    SpawnFailed,
    decode_reply,
    encode,
)

ANSWER_TIMEOUT = 10.0  # seconds for the server to answer a request before it counts as dead
EXIT_GRACE = 1.0  # seconds the server has to exit after its socket closes, before SIGKILL

ExitFuture = asyncio.Future[int | None]


class ForkServerUnavailable(Exception):
    """The fork server could not start or is gone: start children the plain way."""


class ForkServer:
    def __init__(self, argv: Sequence[str], *, cwd: Path, env: dict[str, str]) -> None:
        self.argv = list(argv)  # the server's command; its socket's fd number is appended
        self.cwd = cwd
        self.env = env
        self.pid = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._ids = itertools.count(1)
        self._answers: dict[int, asyncio.Future[tuple[int, ExitFuture]]] = {}  # by request
        self._sending = asyncio.Lock()
        self._send_wait: asyncio.Future[None] | None = None  # a sender's wait for room
        self._exits: dict[int, ExitFuture] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._reader: asyncio.Task[None] | None = None
        self._broken = ""  # why it cannot be used any more
        self._closing = False

    @classmethod
    def attached(cls, sock: socket.socket, pid: int) -> ForkServer:
        """A fork server started by someone else (the warm daemon), served to this process
        on ``sock``: closing it ends nothing but this process's use of it."""
        server = cls([], cwd=Path("/"), env={})
        sock.setblocking(False)
        server._sock = sock
        server.pid = pid
        return server

    async def spawn(
        self, env: dict[str, str], cwd: Path, pid_namespace: bool = False
    ) -> ChildProcess:
        """A child forked with exactly ``env``, in ``cwd``, in a session of its own (and,
        with ``pid_namespace``, pid 1 of a pid namespace of its own).

        ``ForkServerUnavailable`` when the server cannot serve; ``OSError`` when the
        fork itself failed.
        """
        pipes = ChildPipes()
        try:
            pid, exit = await self.fork(env, cwd, pipes.child_ends, pid_namespace=pid_namespace)
            pipes.close_child_ends()  # the server's fork holds them now
            return await attach(pid, pipes, exit)
        finally:
            pipes.close()  # whatever attach did not take

    async def fork(
        self,
        env: dict[str, str],
        cwd: Path,
        fds: list[int],
        *,
        pid_namespace: bool = False,
        program: Program = "child",
        args: Sequence[str] = (),
    ) -> tuple[int, ExitFuture]:
        """Fork ``program`` (a child, the parent's hands) with ``args``, exactly ``env``,
        in ``cwd``, on ``fds`` (its stdin, stdout, stderr; the caller still holds them):
        its pid, and its exit to come. Raises as ``spawn``."""
        if self._broken:
            raise ForkServerUnavailable(self._broken)
        self.start()
        request = Spawn(next(self._ids), env, str(cwd), pid_namespace, program, list(args))
        return await self._ask(request, fds)

    def close(self) -> None:
        """End the server and reap it: it exits at once on EOF. Children it forked go on
        to their own end (stdin EOF, or the supervisor ending their sessions)."""
        self._closing = True
        self._broken = self._broken or "closed"
        if self._reader is None and self._sock is not None:  # launched, never used (a CLI
            self._sock.close()  # that failed before its session): not worth a wait
            if self._process is not None:
                self._process.kill()
        self._stop()

    def _stop(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
        if self._process is not None:
            try:
                self._process.wait(EXIT_GRACE)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def start(self) -> None:
        """Start the server now (it loads in the background), unless it is running or broken,
        and take its answers from here on; in the event loop."""
        self.launch()
        if self._sock is not None and self._reader is None:
            self._reader = self._keep(self._read(self._sock))

    def launch(self) -> None:
        """Start the server's process, with no event loop yet: a CLI does it before its slow
        imports, so the server's own import overlaps them."""
        if self._sock is None and not self._broken:
            self._launch()

    def _launch(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                [*self.argv, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            ours.close()
            raise self._fail(f"could not be started: {exc}") from None
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        self.pid = self._process.pid

    async def _ask(self, request: Spawn, fds: list[int]) -> tuple[int, ExitFuture]:
        """Send one request and wait for its answer; other requests may be under way: the
        server answers them in order, and each answer names its request."""
        async with self._sending:  # one writer: one wait for the socket at a time
            if self._broken or self._sock is None:  # it broke while this one queued
                raise ForkServerUnavailable(self._broken or "not started")
            try:
                await self._send(self._sock, encode(request), fds)
            except OSError as exc:
                raise self._fail(f"stopped taking requests ({exc})") from None
            # registered once sent: no answer can come before, and _fail only wakes
            # requests that are being waited for
            answer = asyncio.get_running_loop().create_future()
            self._answers[request.request] = answer
        try:
            async with asyncio.timeout(ANSWER_TIMEOUT):
                return await answer
        except TimeoutError:
            raise self._fail(f"did not answer within {ANSWER_TIMEOUT:g} s") from None
        finally:
            self._answers.pop(request.request, None)
            if answer.done() and not answer.cancelled():
                answer.exception()  # seen: a timeout may have beaten _fail to this one

    async def _send(self, sock: socket.socket, data: bytes, fds: list[int]) -> None:
        """Send one message, waiting while the socket is full; ``_fail`` ends the wait."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                socket.send_fds(sock, [data], fds)
                return
            except BlockingIOError:
                fd = sock.fileno()  # by number: _read may close the socket meanwhile
                self._send_wait = loop.create_future()
                loop.add_writer(fd, _settle, self._send_wait)
                try:
                    await self._send_wait
                finally:
                    loop.remove_writer(fd)
                    self._send_wait = None

    async def _read(self, sock: socket.socket) -> None:
        """Dispatch the server's messages until its socket ends; then clean up after it."""
        loop = asyncio.get_running_loop()
        why = "exited"
        try:
            try:
                while data := await loop.sock_recv(sock, MAX_MESSAGE):
                    self._dispatch(decode_reply(data))
            except (OSError, msgspec.DecodeError) as exc:
                why = f"failed ({exc})"
            except asyncio.CancelledError:  # the loop is shutting down: the server must go too
                self._closing = True
                raise
            if not self._closing:
                self._fail(why)
        finally:  # also when cancelled: whoever still waits for a child's exit is answered
            self._stop()
            sock.close()
            for pid, exit in self._exits.items():  # no Exited will come for these
                self._keep(_watch_gone(pid, exit))
            self._exits.clear()

    def _dispatch(self, message: Spawned | SpawnFailed | Exited) -> None:
        match message:
            case Exited(pid=pid, returncode=returncode):
                exit = self._exits.pop(pid, None)
                if exit is not None and not exit.done():
                    exit.set_result(returncode)
            case SpawnFailed(request=0, error=error):  # it could not read one of ours: broken
                self._fail(f"rejected a request ({error})")
            case Spawned() | SpawnFailed():
                self._answer(message)

    def _answer(self, message: Spawned | SpawnFailed) -> None:
        answer = self._answers.pop(message.request, None)
        if answer is None or answer.done():
            if isinstance(message, Spawned):  # the asker gave up: its child gets EOF and ends
                self._exits[message.pid] = asyncio.get_running_loop().create_future()
            return
        if isinstance(message, SpawnFailed):
            answer.set_exception(OSError(message.error))
            return
        exit = asyncio.get_running_loop().create_future()
        self._exits[message.pid] = exit
        answer.set_result((message.pid, exit))

    def _fail(self, why: str) -> ForkServerUnavailable:
        """Mark the server unusable, say so once, and wake a waiting request."""
        if not self._broken:
            self._broken = why
            print(
                f"isoagent: warning: fork server {why}; starting children directly",
                file=sys.stderr,
            )
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
        error = ForkServerUnavailable(self._broken)
        if self._send_wait is not None and not self._send_wait.done():
            self._send_wait.set_exception(error)
        for answer in self._answers.values():  # each is awaited by its asker
            if not answer.done():
                answer.set_exception(error)
        self._answers.clear()
        return error

    def _keep(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _watch_gone(pid: int, exit: ExitFuture, poll: float = 0.05) -> None:
    """Settle ``exit`` (returncode unknown) once ``pid`` has ended."""
    while running(pid):
        await asyncio.sleep(poll)
    if not exit.done():
        exit.set_result(None)


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
        return stat_fields(pid)[STATE] not in DEAD
    except ProcessLookupError:
        return False
    except (OSError, IndexError):
        return True
