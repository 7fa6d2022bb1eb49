"""This user's warm daemons, each verified before it is believed: ``isoagent gateway
list|stop`` and the bound on how many live at once.

Any local user can bind an abstract socket of any name, one like a daemon's too. So a name
is only a hint: a daemon counts when the process listening there is this user's
(``SO_PEERCRED``) and answers with its status from the pid it holds; it is stopped by
asking it, and waited for through a pidfd of the process that answered, never by a pid
that may have been reused meanwhile. Names are read from ``/proc/net/unix`` and taken only
in their exact shape (the prefix, the uid and a hex digest): nothing else reaches a terminal.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import socket
import struct
from dataclasses import dataclass

from isoagent.parent.daemon import address
from isoagent.parent.model import warm

_ACCEPTING = 0x10000  # /proc/net/unix's flag of a listening socket (__SO_ACCEPTCON)
_SO_PEERPIDFD = 77  # Linux 6.5


@dataclass
class Daemon:
    """A daemon that answered: its address, its status, and a pidfd of its process."""

    where: str
    status: warm.GatewayStatus
    pidfd: int

    @property
    def id(self) -> str:
        return self.where.rsplit("-", 1)[-1][:12]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.pidfd)

    def wait(self, seconds: float) -> bool:
        """Whether it has exited within ``seconds``."""
        return bool(select.select([self.pidfd], [], [], seconds)[0])


def listening() -> list[str]:
    """The addresses named as this user's daemons that listen in this network namespace."""
    name = f"@{re.escape(address.PREFIX)}{os.geteuid()}-[0-9a-f]{{{address.DIGEST_HEX}}}"
    shape = re.compile(name)
    found: set[str] = set()
    with open("/proc/net/unix", encoding="utf-8", errors="replace") as table:
        next(table, None)  # Num RefCount Protocol Flags Type St Inode Path
        for line in table:
            fields = line.split()
            if len(fields) == 8 and int(fields[3], 16) & _ACCEPTING and shape.fullmatch(fields[7]):
                found.add("\0" + fields[7][1:])
    return sorted(found)


def ask(where: str, request: warm.StatusAsked | warm.StopAsked, seconds: float = 5.0) -> Daemon:
    """Ask the daemon at ``where``; OSError unless the process there is this user's and
    answers from the pid it connected with (then the pidfd is of that process)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(seconds)
        sock.connect(where)
        credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        pid, uid, _gid = struct.unpack("3i", credentials)
        if uid != os.geteuid():
            raise OSError("its address is held by another user's process")
        try:
            pidfd = sock.getsockopt(socket.SOL_SOCKET, _SO_PEERPIDFD)
        except OSError:  # an older kernel
            pidfd = os.pidfd_open(pid)
        try:
            status = warm.exchange(sock, request)
            if status.pid != pid:
                raise OSError(f"it answered as pid {status.pid}, not its own {pid}")
        except BaseException:
            os.close(pidfd)
            raise
    return Daemon(where, status, pidfd)


def running() -> list[Daemon]:
    """This user's daemons that answer, each verified; the caller closes them."""
    found = []
    for where in listening():
        with contextlib.suppress(OSError):
            found.append(ask(where, warm.StatusAsked()))
    return found


def make_room(mine: str, most: int) -> None:
    """Stop the daemons of this user beyond ``most - 1`` others (``mine`` is about to be one
    more), the longest idle first; none that runs a session or a call is stopped."""
    others = [d for d in running() if d.where != mine]
    try:
        idle = [d for d in others if not d.status.calls_running and not d.status.sessions_running]
        idle.sort(key=lambda d: d.status.quiet_seconds, reverse=True)
        for daemon in idle[: max(len(others) - most + 1, 0)]:
            with contextlib.suppress(OSError):
                ask(daemon.where, warm.StopAsked()).close()
    finally:
        for daemon in others:
            daemon.close()
