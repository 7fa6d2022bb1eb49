"""The thin client: ``isoagent task|run|batch`` and ``-p`` handed to this user's warm daemon.

Standard library only, and little of it (``_socket``, not ``socket``: the latter's enums cost
more than the rest): the calling process sends its argv, environment, umask, working
directory and stdin, stdout and stderr (``SCM_RIGHTS``) to the daemon, which forks a session
process that runs the command on them exactly as this process would have; the client
forwards the signals it gets (Ctrl-C, SIGTERM, SIGHUP, the window's size, Ctrl-Z and ``fg``)
through a pidfd of that process, and exits with its exit status.

No daemon listening: one is started (``python -m isoagent.parent.daemon``, detached) and
waited for. Turned off (``ISOAGENT_DAEMON=0``; ``ISOAGENT_WARM_GATEWAY=0`` turns off the
gateway too), or the daemon cannot be started or used (an address held by another user, a
daemon that refuses): ``run`` returns None and the command runs in this process, as it did
before the daemon (said in one line, unless turned off).
"""

from __future__ import annotations

import _signal as signal  # not signal: it imports enum, and with it most of collections
import _socket
import os
import struct
import sys
import time

from isoagent.parent.daemon import address, wire

VARIABLE = "ISOAGENT_WARM_GATEWAY"  # 0: no daemon, no gateway: every invocation on its own
DAEMON_VARIABLE = "ISOAGENT_DAEMON"  # 0: commands run in their own process (the gateway warm)
IDLE_VARIABLE = "ISOAGENT_WARM_GATEWAY_IDLE"  # seconds; tests make it short
MOST_VARIABLE = "ISOAGENT_WARM_DAEMONS"  # how many of this user's may live at once
DEPTH_VARIABLE = "ISOAGENT_DEPTH"  # set in every child: no session starts there
START_SECONDS = 30.0  # how long a starting daemon may take to import and listen
THIN_COMMANDS = ("task", "run", "batch")
# the signals a session hears as the command's own process would
FORWARDED = (
    signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGWINCH,
    signal.SIGUSR1, signal.SIGUSR2, signal.SIGTSTP, signal.SIGCONT,
)  # fmt: skip
_SO_PEERCRED = 17
_FD = struct.Struct("i")


def thin(argv: list[str]) -> bool:
    """The commands that run a session: ``task``, ``run``, ``batch`` and ``-p``."""
    if not argv:
        return False
    if argv[0] in THIN_COMMANDS:
        return True
    options = argv[: argv.index("--")] if "--" in argv else argv
    return argv[0].startswith("-") and any(
        a in ("-p", "--print") or a.split("=")[0] == "--input-format" for a in options
    )


def run(argv: list[str]) -> int | None:
    """``isoagent ARGV`` run by the warm daemon: its exit status; None: run it here."""
    environ = os.environ
    if (
        not thin(argv)
        or "0" in (environ.get(VARIABLE, "1"), environ.get(DAEMON_VARIABLE, "1"))
        or environ.get(DEPTH_VARIABLE)
    ):
        return None
    try:
        where = address.daemon_address(environ)
        sock = _connect_or_start(where, environ)
    except OSError as exc:
        _say(f"the warm daemon cannot be used ({exc}); running in this process")
        return None
    try:
        return _Invocation(sock).run(argv)
    finally:
        sock.close()


def _connect_or_start(where: str, environ: os._Environ[str]) -> _socket.socket:
    """A connection to this user's daemon at ``where``, started if none listens."""
    try:
        return _connect(where)
    except ConnectionRefusedError:
        pass
    started = start(where, environ)
    deadline = time.monotonic() + START_SECONDS
    while True:
        try:
            return _connect(where)
        except ConnectionRefusedError:
            pass
        # exit 0 before it listens: another invocation's daemon won the address, and loads
        why = exited(started)
        if why:
            raise OSError(why)
        if time.monotonic() > deadline:
            raise OSError(f"it did not listen within {START_SECONDS:g} s")
        time.sleep(0.01)


def _connect(where: str) -> _socket.socket:
    """Connected to ``where``; OSError if the process listening there is another user's."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        sock.connect(where)
        pid, uid, _gid = struct.unpack("3i", sock.getsockopt(1, _SO_PEERCRED, 12))
        if uid != os.geteuid():
            raise OSError(f"its address is held by another user's process (pid {pid})")
    except BaseException:
        sock.close()
        raise
    return sock


def start(where: str, environ: os._Environ[str] | dict[str, str]) -> int:
    """Start the daemon for ``where``, detached (a session of its own, no descriptor of
    ours), with only the variables its address is made of and its own settings; its pid.
    The daemon exits at once if the address it finds for itself is not ``where``."""
    own = {
        k: environ[k] for k in (IDLE_VARIABLE, MOST_VARIABLE, "PYTHONPATH", "HOME") if k in environ
    }
    argv = [sys.executable, "-P", "-m", "isoagent.parent.daemon", where[1:]]
    null = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    return os.posix_spawn(
        sys.executable, argv, address.configuration(environ) | own, file_actions=null,
        setsid=True,
    )  # fmt: skip


def exited(daemon: int) -> str:
    """Why the daemon ``daemon`` that this process started has failed ("" when it runs,
    or left with status 0: another one holds its address); reaped if it has ended."""
    try:
        ended, status = os.waitpid(daemon, os.WNOHANG)
    except ChildProcessError:  # reaped by someone else: its status is unknown
        return ""
    if ended and status:
        return f"it exited with status {os.waitstatus_to_exitcode(status)}"
    return ""


class _Invocation:
    """One command sent to the daemon: its signals forwarded, its end awaited."""

    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock
        self.pidfd = -1
        self.pending: list[int] = []  # signals that came before the session started
        self.saved: dict[int, object] = {}

    def run(self, argv: list[str]) -> int | None:
        closed = "".join(str(fd) for fd, s in enumerate(_streams()) if s is None)
        _fill_closed_descriptors()
        umask = os.umask(0o22)
        os.umask(umask)
        cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        invocation = wire.Invocation(
            argv, dict(os.environ), umask, closed, [_encoding(s) for s in _streams()]
        )
        for signum in FORWARDED:
            self.saved[signum] = signal.signal(signum, self._forward)
        try:
            data = invocation.encode()
            fds = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack("4i", 0, 1, 2, cwd))]
            try:
                sent = self.sock.sendmsg([data], fds)
                self.sock.sendall(data[sent:])
            except OSError as exc:
                self._refused(f"it did not take the command ({exc.strerror or exc})")
                return None
            finally:
                os.close(cwd)
            return self._wait()
        finally:
            for signum, handler in self.saved.items():
                signal.signal(signum, handler)  # type: ignore[arg-type]
            if self.pidfd >= 0:
                os.close(self.pidfd)

    def _wait(self) -> int | None:
        """The session's end, as its frames tell it."""
        while True:
            kind, body = self._frame()
            if kind == wire.STARTED:
                for signum in self.pending:
                    self._send(signum)
                self.pending.clear()
            elif kind == wire.EXITED:
                return int(wire.CODE.unpack(body)[0])
            elif kind == wire.KILLED:
                (signum,) = wire.CODE.unpack(body)
                name = signal.strsignal(signum) or f"signal {signum}"
                _say(
                    f"the warm daemon's session was killed ({name}): what finished is kept (a "
                    "batch with -o goes on from there when run again; see 'isoagent logs')"
                )
                return 128 + signum
            elif kind == wire.REFUSED:
                self._refused(body.decode(errors="replace"))
                return None
            else:
                _say(
                    "the warm daemon went away during the run: what finished is kept (a "
                    "batch with -o goes on from there when run again; see 'isoagent logs')"
                )
                return 1

    def _frame(self) -> tuple[bytes, bytes]:
        """The next frame; (b"", b"") at the end. A pidfd that comes along is kept."""
        header = self._read(wire.HEADER.size)
        if len(header) < wire.HEADER.size:
            return b"", b""
        kind, length = wire.HEADER.unpack(header)
        body = self._read(min(length, wire.MAX_ANSWER))
        return (kind, body) if len(body) == length else (b"", b"")

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            try:
                chunk, ancillary, _flags, _ = self.sock.recvmsg(size - len(data), 64)
            except ConnectionResetError:
                return data
            for level, kind, fds in ancillary:
                if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                    for (fd,) in _FD.iter_unpack(fds[: len(fds) - len(fds) % _FD.size]):
                        if self.pidfd < 0:
                            self.pidfd = fd
                        else:
                            os.close(fd)
            if not chunk:
                return data
            data += chunk
        return data

    def _refused(self, why: str) -> None:
        """Run the command here after all; the signals heard meanwhile are this process's."""
        _say(f"the warm daemon cannot run this ({why}); running in this process")
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self.saved.clear()
        for signum in self.pending:
            os.kill(os.getpid(), signum)

    def _forward(self, signum: int, _frame: object) -> None:
        if self.pidfd < 0:
            self.pending.append(signum)
            return
        self._send(signum)

    def _send(self, signum: int) -> None:
        """The session hears ``signum``; Ctrl-Z stops it (a process outside any terminal's
        session ignores SIGTSTP), then this process, as the shell expects."""
        try:
            if signum == signal.SIGTSTP:
                signal.pidfd_send_signal(self.pidfd, signal.SIGSTOP)
                signal.signal(signal.SIGTSTP, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTSTP)  # here until the shell's fg
                signal.signal(signal.SIGTSTP, self._forward)
                signum = signal.SIGCONT
            signal.pidfd_send_signal(self.pidfd, signum)
        except ProcessLookupError:  # it has ended: its exit status is on the way
            pass


def _streams() -> tuple[object, object, object]:
    return sys.stdin, sys.stdout, sys.stderr


def _encoding(stream: object) -> str:
    return f"{getattr(stream, 'encoding', 'utf-8')}:{getattr(stream, 'errors', 'strict')}"


def _fill_closed_descriptors() -> None:
    """/dev/null where the shell closed stdin, stdout or stderr (``<&-``), as the command
    itself does (``main.fill_closed_streams``): the session gets three descriptors."""
    fd = os.open(os.devnull, os.O_RDWR)
    while fd <= 2:
        fd = os.open(os.devnull, os.O_RDWR)
    os.close(fd)


def _say(message: str) -> None:
    try:  # noqa: SIM105 -- contextlib's imports would cost more than this whole module's
        os.write(2, f"isoagent: {message}\n".encode(errors="replace"))
    except OSError:
        pass
