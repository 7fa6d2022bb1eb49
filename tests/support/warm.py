"""The warm gateways a test worker's ``isoagent`` processes use, and ending them."""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING

from isoagent.parent.model import warm
from tests.support.processes import alive, wait_for

if TYPE_CHECKING:
    from tests.support.messages_server import MessagesServer

# how long the worker's gateway stays when idle: the whole session (it is ended at its end),
# or ten minutes for one a killed session leaves
IDLE = "600"


class WarmGateways:
    """Those started for the worker's shared server (`server`): `env` turns one on."""

    def __init__(self) -> None:
        self.env = {warm.VARIABLE: "1", warm.IDLE_VARIABLE: IDLE}
        self.server: MessagesServer | None = None
        self._addresses: set[str] = set()  # every one used in the session
        self._this_test: set[str] = set()

    def used(self, env: dict[str, str]) -> None:
        if warm.enabled(env):
            self._addresses.add(warm.address(env))
            self._this_test.add(warm.address(env))

    def on(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` (whose ``ANTHROPIC_*`` point at `server`) with the shared gateway on, and
        this process's proxy and certificate variables, which its address is made of too."""
        mine = warm._configuration(os.environ)
        http = {k: v for k, v in mine.items() if not k.startswith("ANTHROPIC_")}
        env = {**env, **http, **self.env}
        self.used(env)
        return env

    def in_process(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` for a command run in this process: the worker's shared gateway off. The
        worker has the SDK imported already, so a gateway would only add a process (and its
        own import of the SDK) between the command and the server."""
        if env.get(warm.VARIABLE) == "1" and env.get(warm.IDLE_VARIABLE) == IDLE:
            return {**env, warm.VARIABLE: "0"}
        return env

    def test_started(self) -> None:
        self._this_test.clear()

    def end_this_tests(self) -> None:
        """End those the test used, so that the next test starts a fresh one."""
        self._end(self._this_test)

    def end_all(self) -> None:
        self._end(self._addresses)

    @staticmethod
    def _end(addresses: set[str]) -> None:
        """SIGTERM each, and wait until it is gone."""
        for where in addresses:
            pid = warm.listener_pid(where)
            if pid:
                os.kill(pid, signal.SIGTERM)
                wait_for(lambda pid=pid: not alive(pid), 10)
