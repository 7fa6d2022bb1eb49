"""Where a child runs: how it is started, watched while it talks, and ended.

A run of one child (``child_run.ChildRun``) speaks the protocol the same
way wherever the child is; everything that depends on where is a launcher's:

- ``LocalLaunch``: on this machine, forked by the session's fork server (or started with
  fork and exec), in cgroups of its own, with a private temp folder that is also its tag;
  ended by signalling its session and cgroup.
- ``HostLaunch``: on a host of ``--hosts``, through the placement's host server or a
  launcher connection of its own (ssh, srun, kubectl); it makes its temp folder there,
  a heartbeat watches the link, and a failure before its Hello is a launch failure
  that the placement tries again elsewhere.
- ``RefusedLaunch``: no host could take it; starting it fails with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from isoagent.child.agent.process_tree import start_time
from isoagent.parent.children.cgroups import ChildCgroup, RunCgroups
from isoagent.parent.children.cleanup import end_session
from isoagent.parent.children.forkserver import ForkServer, ForkServerUnavailable
from isoagent.parent.children.host_link import HostLink, LinkFailed
from isoagent.parent.children.hosts import HostEntry
from isoagent.parent.children.launch import (
    CHILD_COMMAND,
    PACKAGE_ROOT,
    child_environment,
    exec_child,
)
from isoagent.parent.children.placement import Attempt, LauncherFailed, Placement
from isoagent.parent.children.process import ChildProcess
from isoagent.parent.children.remote import LINK_FAILED, keep_link
from isoagent.parent.records.events import ChildFinished
from isoagent.parent.settings import Settings
from isoagent.protocol import FrameError, Result, Status

HELLO_TIMEOUT = 30.0
CANCEL_GRACE = 2.0  # seconds a cancelled child has to send its Result


class ChildFailed(Exception):
    """The child broke the protocol or ended early; the message says how."""

    def __init__(self, message: str, status: Status = "crashed") -> None:
        super().__init__(message)
        self.status = status


class ChildLauncher(Protocol):
    """One child's place: what its Task says of it, its start, its watch, its end."""

    host_name: str  # "" on this machine
    workdir: str  # the workspace, as the child sees it
    tmpdir: str  # its private temp folder here ("": it makes one where it runs)
    heartbeat: float  # seconds of silence that make its link dead (0: no link to watch)
    hello_timeout: float  # from the start until its Hello
    launched: bool | None  # whether it said Hello where it was launched (None: not asked)
    link_lost: bool

    def tag(self, stem: str) -> str:
        """What finds the child and everything it started, while it lives."""
        ...

    async def start(self, pid_namespace: bool) -> ChildProcess:
        """Start it (``pid_namespace``: its sandbox gives it one, which a fork server can
        make as it forks)."""
        ...

    def said_hello(self) -> None: ...

    def unreadable_hello(self, exc: FrameError) -> Exception:
        """What to raise when the first bytes are not a frame."""
        ...

    def not_started(self, why: str) -> ChildFailed: ...

    async def watch(self, talk: Coroutine[Any, Any, Result], process: ChildProcess) -> Result:
        """The child's conversation (``talk``) to its Result, watching its link meanwhile."""
        ...

    def failure(self, exc: ChildFailed, process: ChildProcess) -> str:
        """How to say that the child failed: a dropped link is named as one."""
        ...

    async def end(self, process: ChildProcess) -> None:
        """End the child and whatever it started."""
        ...

    def close(self) -> None:
        """Remove what the launch made here (the temp folder)."""
        ...


class LocalLaunch:
    """A child on this machine."""

    heartbeat = 0.0
    hello_timeout = HELLO_TIMEOUT
    launched: bool | None = None
    link_lost = False

    def __init__(
        self,
        settings: Settings,
        child_id: str,
        child_command: list[str],
        fork_server: ForkServer | None,
        cgroups: RunCgroups,
        host: HostEntry | None = None,
    ) -> None:
        self.settings = settings
        self.id = child_id
        self.child_command = child_command
        self.fork_server = fork_server
        self.cgroups = cgroups
        self.host_name = "" if host is None else host.name
        self.workdir = str(settings.workdir)
        self.unmade = ""  # why its temp folder could not be made (a full disk): it fails to start
        try:
            self.tmpdir = tempfile.mkdtemp(prefix=f"isoagent-{child_id}-")
        except OSError as exc:
            self.tmpdir = ""
            self.unmade = f"cannot make its temp folder: {exc.strerror or exc}"
        self.born = 0  # its start_time: what it started began later
        self.cgroup: ChildCgroup | None = None

    def tag(self, stem: str) -> str:
        return self.tmpdir

    async def start(self, pid_namespace: bool) -> ChildProcess:
        if self.unmade:
            raise ChildFailed(f"was not started: {self.unmade}", "launch_failed")
        env = child_environment(self.tmpdir)
        process: ChildProcess | None = None
        if self.fork_server is not None:
            with contextlib.suppress(ForkServerUnavailable):
                try:
                    process = await self.fork_server.spawn(env, PACKAGE_ROOT, pid_namespace)
                except OSError as exc:
                    raise ChildFailed(f"could not be forked: {exc}") from None
        if process is None:
            command = self.child_command
            try:
                process = await exec_child(command, cwd=PACKAGE_ROOT, env=env)
            except OSError as exc:
                raise ChildFailed(f"could not be started ({' '.join(command)}): {exc}") from None
        self.born = start_time(process.pid)
        limits = self.settings.limits  # the child waits for its Task: it started nothing yet
        self.cgroup = self.cgroups.join(
            f"child-{self.id}-{process.pid}",
            process.pid,
            limits.max_processes,
            limits.address_space_mb,
        )
        return process

    def said_hello(self) -> None:
        pass

    def unreadable_hello(self, exc: FrameError) -> Exception:
        return exc

    def not_started(self, why: str) -> ChildFailed:
        return ChildFailed(why)

    async def watch(self, talk: Coroutine[Any, Any, Result], process: ChildProcess) -> Result:
        return await talk

    def failure(self, exc: ChildFailed, process: ChildProcess) -> str:
        return str(exc)

    async def end(self, process: ChildProcess) -> None:
        await end_session(process, self.tmpdir, self.born, cgroup=self.cgroup)

    def close(self) -> None:
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)


class HostLaunch:
    """A child on a host of ``--hosts``, started through the session's placement."""

    tmpdir = ""  # it makes its own, on its host

    def __init__(
        self, placement: Placement, host: HostEntry | None, settings: Settings, run_id: str
    ) -> None:
        remote = placement.remote
        self.placement = placement
        self.host = host
        self.host_name = "" if host is None else host.name
        self.settings = settings
        self.run_id = run_id
        self.workdir = remote.remote_workdir or str(settings.workdir)
        self.heartbeat = remote.heartbeat
        self.hello_timeout = remote.launch_timeout  # a queue's wait included
        self.launched: bool | None = None
        self.link_lost = False
        self.link: HostLink | None = None  # its host server's, when it is a channel on one

    def tag(self, stem: str) -> str:
        return f"isoagent-{self.run_id}-{stem}"  # unique on any host

    async def start(self, pid_namespace: bool) -> ChildProcess:
        assert self.host is not None
        try:
            process, self.link = await self.placement.launch(self.host, self.settings.workdir)
        except LinkFailed as exc:
            raise self.not_started(str(exc)) from None
        except LauncherFailed as exc:
            self.launched = False
            raise ChildFailed(str(exc), "launch_failed") from None
        return process

    def said_hello(self) -> None:
        self.launched = True

    def unreadable_hello(self, exc: FrameError) -> Exception:
        why = f"sent bytes that are not a frame ({exc}): does the login print to stdout?"
        return self.not_started(why)

    def not_started(self, why: str) -> ChildFailed:
        self.launched = False
        return ChildFailed(f"did not start on host {self.host_name}: {why}", "launch_failed")

    async def watch(self, talk: Coroutine[Any, Any, Result], process: ChildProcess) -> Result:
        talking = asyncio.ensure_future(talk)
        link = asyncio.ensure_future(keep_link(process.stdin, process.frames, self.heartbeat))
        try:
            await asyncio.wait([talking, link], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for part in (talking, link):
                part.cancel()
            await asyncio.gather(talking, link, return_exceptions=True)
        if not talking.cancelled():
            return talking.result()
        self.link_lost = True
        raise ChildFailed(
            f"lost its link to host {self.host_name}: nothing heard for {self.heartbeat:g} s"
        )

    def failure(self, exc: ChildFailed, process: ChildProcess) -> str:
        if (
            self.launched
            and not self.link_lost
            and exc.status == "crashed"
            and process.returncode == LINK_FAILED
        ):
            self.link_lost = True  # ssh's code for a dropped connection
            return f"lost its link to host {self.host_name}: {exc}"
        return str(exc)

    async def end(self, process: ChildProcess) -> None:
        if self.link is None:  # its own launcher connection, a session here
            await end_session(process, "")
            return
        # a channel on a host server: its stdin's end tells it to end itself and what it
        # started, there (its pid is a pid there: nothing here may be signalled)
        process.close_pipes()
        await process.wait_exit(CANCEL_GRACE)

    def close(self) -> None:
        pass


class RefusedLaunch(HostLaunch):
    """A child that no host can take: its start fails with the reason."""

    def __init__(self, placement: Placement, settings: Settings, why: str) -> None:
        super().__init__(placement, None, settings, "")
        self.why = why

    async def start(self, pid_namespace: bool) -> ChildProcess:
        raise ChildFailed(f"was not started: {self.why}", "launch_failed")


class Launchers:
    """A session's launchers: each child's, on this machine or placed on ``--hosts``."""

    def __init__(self, settings: Settings, fork_server: ForkServer | None, run_id: str) -> None:
        self.settings = settings
        self.fork_server = fork_server
        self.run_id = run_id
        self.child_command = settings.child_command or CHILD_COMMAND
        self.cgroups = RunCgroups.open()
        self.placement = None if settings.remote is None else Placement(settings.remote)

    async def run(
        self, number: int, attempt: Callable[[ChildLauncher, int], Attempt]
    ) -> ChildFinished:
        """Run child ``number`` as ``attempt`` (its launcher, the how-manieth try) makes
        it: here, or on a host of the pool and again elsewhere if that fails."""
        placement = self.placement
        if placement is None:
            return await attempt(self._local(number), 0).run()
        return await placement.run(
            lambda host, tries, refused: attempt(self._placed(number, host, refused), tries)
        )

    def _local(self, number: int, host: HostEntry | None = None) -> LocalLaunch:
        return LocalLaunch(
            self.settings, f"{number:03d}", self.child_command, self.fork_server, self.cgroups, host
        )

    def _placed(self, number: int, host: HostEntry | None, refused: str) -> ChildLauncher:
        assert self.placement is not None
        if host is None:
            return RefusedLaunch(self.placement, self.settings, refused)
        if host.is_local:
            return self._local(number, host)
        return HostLaunch(self.placement, host, self.settings, self.run_id)

    async def close(self) -> None:
        """End what outlives single children: host servers, ssh control masters, the
        run's cgroup folders."""
        self.cgroups.close()
        if self.placement is not None:
            await self.placement.close()
