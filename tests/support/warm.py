"""The warm daemons a test worker's ``isoagent`` processes use, ending them, and the check
that the suite leaves none running."""

from __future__ import annotations

import contextlib
import signal
import time
from typing import TYPE_CHECKING

from isoagent.parent.daemon import address, peers
from isoagent.parent.model import warm
from tests.support.messages_server import OUR_URLS

if TYPE_CHECKING:
    from tests.support.messages_server import MessagesServer

# how long the worker's daemon stays when idle: the whole session (it is ended at its end),
# or ten minutes for one a killed session leaves
IDLE = "600"
LEAVE_SECONDS = 20.0  # for a test's own daemons (idle 1-2 s) to leave by themselves


class WarmGateways:
    """Those started for the worker's shared server (`server`): `env` turns one on."""

    def __init__(self) -> None:
        self.env = {warm.VARIABLE: "1", warm.IDLE_VARIABLE: IDLE}
        self.server: MessagesServer | None = None
        self._addresses: set[str] = set()  # every one used in the session
        self._this_test: set[str] = set()

    def used(self, env: dict[str, str]) -> None:
        if warm.enabled(env):
            where = address.daemon_address(env)
            self._addresses.add(where)
            self._this_test.add(where)

    def on(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` (whose ``ANTHROPIC_*`` point at `server`) with the shared daemon on, and
        this process's proxy and certificate variables, which its address is made of too."""
        import os

        mine = address.configuration(os.environ)
        http = {k: v for k, v in mine.items() if not k.startswith("ANTHROPIC_")}
        env = {**env, **http, **self.env}
        self.used(env)
        return env

    def in_process(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` for a command run in this process: the worker's shared daemon off. The
        worker has the SDK imported already, so a gateway would only add a process (and its
        own import of the SDK) between the command and the server."""
        if env.get(warm.VARIABLE) == "1" and env.get(warm.IDLE_VARIABLE) == IDLE:
            return {**env, warm.VARIABLE: "0"}
        return env

    def test_started(self) -> None:
        self._this_test.clear()

    def end_this_tests(self) -> None:
        """End those the test used, so that the next test starts a fresh one."""
        for where in self._this_test:
            end(where)

    def end_all(self) -> None:
        """End every daemon the tests' envs named, and every one serving a URL this
        process gave out (`end_serving`)."""
        for where in self._addresses:
            end(where)
        end_serving()


def listener_pid(where: str) -> int:
    """The pid of the process that listens at abstract socket ``where`` (0: none)."""
    import socket
    import struct

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(where)
        except OSError:
            return 0
        credentials = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        return int(struct.unpack("3i", credentials)[0])


def end(where: str) -> None:
    """Stop the daemon at ``where`` and wait until it is gone; killed if it lingers."""
    try:
        daemon = peers.ask(where, warm.StopAsked())
    except OSError:
        return
    try:
        if not daemon.wait(10):
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(daemon.pidfd, signal.SIGKILL)
            daemon.wait(10)
    finally:
        daemon.close()


def end_serving() -> None:
    """End every daemon serving a URL this process gave out: a test (or a bench row) that
    changed its environment (another key, a model variable), or never named one, started
    it at an address of its own, and it would live its idle time."""
    for daemon in peers.running():
        daemon.close()
        if daemon.status.server in OUR_URLS:
            end(daemon.where)


def leftovers() -> list[str]:
    """The daemons still serving a URL this process gave out, once those that idle out
    have had time to; each is ended, and named."""
    deadline = time.monotonic() + LEAVE_SECONDS
    while True:
        found = [d for d in peers.running() if d.status.server in OUR_URLS]
        if not found or time.monotonic() > deadline:
            break
        for daemon in found:
            daemon.close()
        time.sleep(0.5)
    names = []
    for daemon in found:
        names.append(f"pid {daemon.status.pid} serving {daemon.status.server}")
        daemon.close()
        end(daemon.where)
    return names
