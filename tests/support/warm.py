"""The warm gateways a test worker's ``isoagent`` processes use, and ending them."""

from __future__ import annotations

import os
import signal
import socket
import struct
from typing import TYPE_CHECKING

from isoagent.parent.model import warm
from tests.support.processes import alive, wait_for

if TYPE_CHECKING:
    from tests.support.messages_server import MessagesServer


class WarmGateways:
    """Those started for the worker's shared server (`server`): `env` turns one on."""

    def __init__(self) -> None:
        self.env = {warm.VARIABLE: "1", warm.IDLE_VARIABLE: "60"}  # a lost one goes in 60 s
        self.server: MessagesServer | None = None
        self._addresses: set[str] = set()

    def used(self, env: dict[str, str]) -> None:
        if warm.enabled(env):
            self._addresses.add(warm.address(env))

    def end_all(self) -> None:
        """SIGTERM each, and wait until it is gone, so the next test starts a fresh one."""
        for where in self._addresses:
            pid = listener(where)
            if pid:
                os.kill(pid, signal.SIGTERM)
                wait_for(lambda pid=pid: not alive(pid), 10)


def listener(where: str) -> int:
    """The pid of the process listening on abstract socket ``where``, or 0."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(where)
        except OSError:
            return 0
        creds = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _uid, _gid = struct.unpack("3i", creds)
    return int(pid)
