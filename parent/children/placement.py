"""Placing children on hosts (``--hosts``) and trying again elsewhere when one fails.

Each child takes a free slot of the host pool (``remote.py``) and is started there
through the launcher: forked by the host's one host server (``host_link.py``), or,
with ``ISOAGENT_HOST_SERVER=0`` or a template without ``{host}``, by a launcher
connection of its own. A launch that fails, or a link that dies (and a crash, with
``retry_crashed``), is tried again on another host, up to ``--retries`` times; each
failed attempt's transcript and log stay beside the next one's as ``-retryN``. The
pool marks a host down after failed launches in a row.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from isoagent.parent.children.host_link import HostLink
from isoagent.parent.children.hosts import HostEntry, RemoteSettings
from isoagent.parent.children.launch import exec_child
from isoagent.parent.children.process import ChildProcess
from isoagent.parent.children.remote import HostPool, Launcher, NoHostLeft, launcher_environment
from isoagent.parent.records.events import ChildFinished

HOST_SERVER_VARIABLE = "ISOAGENT_HOST_SERVER"  # 0: a launcher connection per remote child


class LauncherFailed(Exception):
    """The launcher itself could not be run; the message says which and why."""


class Attempt(Protocol):
    """One try at running a child (the supervisor's run of one child)."""

    id: str

    @property
    def launched(self) -> bool | None:
        """Whether it said Hello on its host (None: nothing launched)."""
        ...

    @property
    def link_lost(self) -> bool: ...

    async def run(self) -> ChildFinished: ...


# a new attempt: on this host (None: on none, refused for the reason given), the how-manieth
StartAttempt = Callable[[HostEntry | None, int, str], Attempt]


def attempt_stem(stem: Path, attempt: int) -> Path:
    """Where an attempt's transcript and log go: a retry's beside the failed ones'."""
    return stem.with_name(f"{stem.name}-retry{attempt}") if attempt else stem


class Placement:
    """The hosts of one session: their slots, their launcher and host servers."""

    def __init__(self, remote: RemoteSettings) -> None:
        self.remote = remote
        self.launcher = Launcher(remote.launcher, remote.remote_python)
        # a warm start per host: one host server each, for the run (HOST_SERVER=0: a launch
        # per child); a template without {host} leaves each child's placement to its engine
        self.host_servers = (
            self.launcher.places and os.environ.get(HOST_SERVER_VARIABLE, "1").strip() != "0"
        )
        self._links: dict[str, HostLink] = {}
        self.pool = HostPool(list(remote.hosts))

    async def run(self, start: StartAttempt) -> ChildFinished:
        """Run the child on a host of the pool; again on another one after a failed
        launch or a lost link (and a crash, with ``retry_crashed``)."""
        remote = self.remote
        tried: set[str] = set()
        attempt = 0
        while True:
            try:
                host = await self.pool.acquire(tried)
            except NoHostLeft as exc:
                return await start(None, attempt, str(exc)).run()
            tried.add(host.name)
            child = start(host, attempt, "")
            try:
                finished = await child.run()
            finally:
                self.pool.release(host, child.launched)
            why = _worth_retrying(child, finished, remote.retry_crashed)
            if not why or attempt >= remote.retries:
                return finished
            attempt += 1
            print(
                f"isoagent: child {child.id} {why}; retry {attempt} of {remote.retries}",
                file=sys.stderr,
            )

    async def launch(self, host: HostEntry, workdir: Path) -> tuple[ChildProcess, HostLink | None]:
        """Start a child on ``host``: forked by the host's server (its link comes back
        too), or through a launcher of its own. ``LinkFailed`` or ``LauncherFailed``
        when it cannot be."""
        if self.host_servers:
            link = self.link(host)
            return await link.spawn(self.remote.launch_timeout), link
        env = launcher_environment()
        await self.launcher.warm(host, env)
        argv = self.launcher.argv(host)
        try:
            return await exec_child(argv, cwd=workdir, env=env), None
        except OSError as exc:
            raise LauncherFailed(f"could not run the launcher {argv[0]}: {exc}") from None

    def link(self, host: HostEntry) -> HostLink:
        """``host``'s host server link: the running one, or a new one if it broke."""
        link = self._links.get(host.name)
        if link is None or link.broken:
            argv = self.launcher.argv(host, server=self.remote.heartbeat)
            link = self._links[host.name] = HostLink(
                argv, launcher_environment(), self.remote.heartbeat
            )
        return link

    async def close(self) -> None:
        """End what outlives single children: host servers, ssh control masters."""
        await asyncio.gather(*(link.close() for link in self._links.values()))
        self._links.clear()
        self.launcher.close()


def _worth_retrying(child: Attempt, finished: ChildFinished, retry_crashed: bool) -> str:
    """Why this child should be tried again elsewhere ("": it should not)."""
    result = finished.result
    if not (
        result.status == "launch_failed"
        or child.link_lost
        or (result.status == "crashed" and retry_crashed)
    ):
        return ""
    return result.error.removeprefix("child ")
