"""A session's process: forked from the warm daemon for one invocation, it becomes that
invocation's ``isoagent`` process and runs the command as the client would have.

It takes the client's stdin, stdout, stderr and working directory (received descriptors:
``isatty`` answers for the client's terminal), environment, umask, argv and its streams'
encodings, in a session of its own (no controlling terminal: the client's is the client's,
whose signals it forwards here). It tells the client it started (with a pidfd of itself,
for those signals), runs the command, and sends its exit status. Its client going away is
the terminal hanging up: SIGHUP, as the command's own process would have had.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import traceback
from typing import NoReturn

from isoagent.parent.daemon import address, wire

RECEIVE_SECONDS = 10.0  # for the client to send its invocation, which it does at once
_ending = threading.Event()  # the command has ended: its client's leaving is no hang-up


def become(
    client: socket.socket,
    fork_server: socket.socket | None,
    fork_server_process: subprocess.Popen[bytes] | None,
    daemons: list[socket.socket],
) -> NoReturn:
    """In the forked process: run the invocation ``client`` sends, and exit with its
    status. ``daemons``: the daemon's own sockets, which are not this process's."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for sock in daemons:
            sock.detach()  # not closed by whatever collects it: those numbers are reused
        client.settimeout(RECEIVE_SECONDS)
        try:
            invocation, fds = _receive(client)
            why = _refusal(invocation)
        except (OSError, ValueError) as exc:
            invocation, fds, why = None, [], f"its invocation did not come whole ({exc})"
        if why or invocation is None:
            with contextlib.suppress(OSError):
                client.sendall(wire.frame(wire.REFUSED, why.encode()))
            os._exit(0)
        client.settimeout(None)
        keep = {client.fileno(), *fds}
        if fork_server is not None:
            keep.add(fork_server.fileno())
        _close_all_but(keep)
        pidfd = os.pidfd_open(os.getpid())
        socket.send_fds(client, [wire.frame(wire.STARTED)], [pidfd])
        os.close(pidfd)
        _take(invocation, fds)
        threading.Thread(target=_hang_up_when_gone, args=(client,), daemon=True).start()
        if fork_server is not None and fork_server_process is not None:
            from isoagent.parent.children.forkserver import ForkServer
            from isoagent.parent.children.launch import give_fork_server

            give_fork_server(ForkServer.attached(fork_server, fork_server_process.pid))
        code = _run(invocation.argv)
    except BaseException:  # the glue's own failure: said as a traceback would be
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                if stream is not None:
                    stream.flush()
        _ending.set()
        with contextlib.suppress(OSError):
            client.sendall(wire.frame(wire.EXITED, wire.CODE.pack(code)))
        os._exit(code)


def _receive(client: socket.socket) -> tuple[wire.Invocation, list[int]]:
    """The invocation and its four descriptors; OSError or ValueError if it is not one."""
    head, fds, _flags, _ = socket.recv_fds(client, len(wire.MAGIC) + 4, wire.FDS)
    while len(head) < len(wire.MAGIC) + 4:
        more = client.recv(len(wire.MAGIC) + 4 - len(head))
        if not more:
            raise ValueError("it hung up")
        head += more
    if not head.startswith(wire.MAGIC) or len(fds) != wire.FDS:
        raise ValueError("not an invocation")
    length = int.from_bytes(head[len(wire.MAGIC) :], "big")
    if length > wire.MAX_INVOCATION:
        raise ValueError("too long")
    body = bytearray()
    while len(body) < length:
        chunk = client.recv(min(length - len(body), 1 << 20))
        if not chunk:
            raise ValueError("it hung up")
        body += chunk
    return wire.Invocation.decode(bytes(body)), fds


def _close_all_but(keep: set[int]) -> None:
    """Close every descriptor but stdio and ``keep``: the daemon's, other sessions'."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _refusal(invocation: wire.Invocation) -> str:
    """Its configuration must be the daemon's: the address says so, a peer may not."""
    if address.configuration(invocation.env) != address.configuration(os.environ):
        return "its ANTHROPIC_* or proxy variables are not the daemon's"
    return ""


def _take(invocation: wire.Invocation, fds: list[int]) -> None:
    """Become the invocation's process: its descriptors, folder, environment and streams."""
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    os.fchdir(fds[3])
    for fd in fds:
        os.close(fd)
    os.umask(invocation.umask)
    os.environ.clear()
    os.environ.update(invocation.env)
    sys.argv = ["isoagent", *invocation.argv]
    streams: list[io.TextIOWrapper | None] = [
        _stream(fd, spec) for fd, spec in enumerate(invocation.encodings)
    ]
    for fd, closed in enumerate("012"):
        if closed in invocation.closed:  # as main.fill_closed_streams leaves them
            streams[fd] = None if fd == 0 else open(os.devnull, "w")  # noqa: SIM115
    sys.stdin, sys.stdout, sys.stderr = streams  # type: ignore[assignment]
    for name, stream in zip(("__stdin__", "__stdout__", "__stderr__"), streams, strict=True):
        setattr(sys, name, stream)  # what a shutil.get_terminal_size() asks


def _stream(fd: int, spec: str) -> io.TextIOWrapper:
    """fd as Python makes its standard streams: line-buffered on a terminal (stderr always),
    in the client's encoding and error handler."""
    encoding, _, errors = spec.rpartition(":")
    raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
    buffered: io.BufferedReader | io.BufferedWriter = (
        io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
    )
    line_buffering = fd == 2 or (fd == 1 and raw.isatty())
    return io.TextIOWrapper(
        buffered, encoding=encoding or "utf-8", errors=errors or "strict",
        line_buffering=line_buffering,
    )  # fmt: skip


def _hang_up_when_gone(client: socket.socket) -> None:
    """The client went away (killed, its terminal closed): the session ends as on SIGHUP."""
    with contextlib.suppress(OSError):
        while client.recv(64):
            pass
    if not _ending.is_set():
        os.kill(os.getpid(), signal.SIGHUP)


def _run(argv: list[str]) -> int:
    """The command, as ``isoagent.parent.cli.main.main`` runs it: its exit status."""
    from isoagent.parent.cli.main import cli

    try:
        cli.main(args=argv, prog_name="isoagent")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    return 0
