"""Children on other machines, started through an engine the user already runs.

A launcher template (``--launcher``) is a command line that runs what follows it on a
host: ``ssh -T {host} --`` (the default), ``srun -u -N1 -n1 -w {host} --``, ``kubectl
exec -i {host} --``. Without ``{host}`` the engine places the child itself (``srun -u
-N1 -n1 --``). The command run there is ``PYTHON -E -s -P -m isoagent.child``; ssh
hands its words to the remote shell as one line, so for ssh each is shell-quoted.

Warm start, for ssh: one control master per host for the run (``ssh -M -N``, its
socket in a private folder), and each child's ssh is a session over it: no new TCP
connection, key exchange or login per child. (The other way, a fork server per host
multiplexing every child's pipes over one launcher connection, would start a child
faster still, but needs a multiplexing protocol and makes one process the single
point of failure of every child on its host; measured, the master already meets the
target: see the README.) A template that sets its own ``ControlPath`` or
``ControlMaster`` is left as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from isoagent.parent.children.connection import FrameInbox
from isoagent.parent.children.hosts import HostEntry, HostPool
from isoagent.protocol import Heartbeat, encode_frame

DEFAULT_LAUNCHER = "ssh -T {host} --"
DEFAULT_REMOTE_PYTHON = "python3"
DEFAULT_HEARTBEAT = 15.0
DEFAULT_LAUNCH_TIMEOUT = 120.0  # a Slurm queue can hold a child this long before it starts
HOST_FIELD = "{host}"
LINK_FAILED = 255  # ssh's exit code for its own failures: refused, unknown host, cut link
MASTER_WAIT = 10.0  # seconds a first child waits for its host's control master
MASTER_GRACE = 1.0


class LauncherError(ValueError):
    """A ``--launcher`` template that cannot be used."""


@dataclass
class RemoteSettings:
    """Where children run and how they get there (``--hosts`` and its companions)."""

    hosts: list[HostEntry]
    launcher: str = DEFAULT_LAUNCHER
    remote_python: str = DEFAULT_REMOTE_PYTHON
    remote_workdir: str = ""  # "": the local workspace's path
    heartbeat: float = DEFAULT_HEARTBEAT
    retries: int = 2
    retry_crashed: bool = False
    launch_timeout: float = DEFAULT_LAUNCH_TIMEOUT
    pool: HostPool = field(init=False)

    def __post_init__(self) -> None:
        self.pool = HostPool(self.hosts)


def launcher_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The launcher's environment: the user's own (ssh needs its agent socket, srun its
    SLURM_* settings) without the API credentials. The child keeps only its allow-list."""
    return {k: v for k, v in environ.items() if not k.startswith("ANTHROPIC_")}


class Launcher:
    def __init__(self, template: str, remote_python: str) -> None:
        try:
            self.words = shlex.split(template)
        except ValueError as exc:
            raise LauncherError(f"--launcher {template!r}: {exc}") from None
        if not self.words:
            raise LauncherError("--launcher is empty")
        self.places = any(HOST_FIELD in word for word in self.words)
        self.is_ssh = Path(self.words[0]).name == "ssh"
        command = [remote_python, "-E", "-s", "-P", "-m", "isoagent.child"]
        self.command = [shlex.quote(word) for word in command] if self.is_ssh else command
        own = any(w.lower().startswith(("controlpath", "controlmaster")) for w in self.words)
        self.multiplexes = self.is_ssh and self.places and not own
        self._masters: dict[str, subprocess.Popen[bytes]] = {}
        self._sockets: dict[str, str] = {}
        self._control_dir = ""

    def argv(self, host: HostEntry) -> list[str]:
        """The local command line that starts a child on ``host``."""
        words = self._words(host)
        if self.multiplexes:
            control = ["-o", "ControlMaster=no", "-o", f"ControlPath={self._socket(host)}"]
            words[1:1] = control  # no socket (yet): ssh connects on its own
        return [*words, *self.command]

    def _words(self, host: HostEntry) -> list[str]:
        return [word.replace(HOST_FIELD, host.name) for word in self.words]

    async def warm(self, host: HostEntry, env: dict[str, str]) -> None:
        """Have ``host``'s control master running (started once, in the background); the
        first children wait for it a moment. A master that fails costs only warmth."""
        if not self.multiplexes:
            return
        master = self._masters.get(host.name)
        if master is None or master.poll() is not None:
            master = self._start_master(host, env)
        socket = self._socket(host)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + MASTER_WAIT
        while master is not None and not os.path.exists(socket) and loop.time() < deadline:
            if master.poll() is not None:
                return
            await asyncio.sleep(0.02)

    def _start_master(self, host: HostEntry, env: dict[str, str]) -> subprocess.Popen[bytes] | None:
        words = self._words(host)
        if words[-1] == "--":
            words.pop()
        options = ["-M", "-N", "-o", "ControlPersist=no", "-o", f"ControlPath={self._socket(host)}"]
        try:
            master = subprocess.Popen(
                [words[0], *options, *words[1:]],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        except OSError:
            return None
        self._masters[host.name] = master
        return master

    def _socket(self, host: HostEntry) -> str:
        if not self._control_dir:  # short: a socket's path has room for about 100 bytes
            self._control_dir = tempfile.mkdtemp(prefix="isoagent-ssh-")
        if host.name not in self._sockets:
            self._sockets[host.name] = os.path.join(self._control_dir, str(len(self._sockets)))
        return self._sockets[host.name]

    def close(self) -> None:
        """End every control master (a child still on one loses its link)."""
        for master in self._masters.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(master.pid, signal.SIGTERM)
        for master in self._masters.values():
            try:
                master.wait(MASTER_GRACE)
            except subprocess.TimeoutExpired:
                master.kill()
                master.wait()
        self._masters.clear()
        if self._control_dir:
            shutil.rmtree(self._control_dir, ignore_errors=True)
            self._control_dir = ""


async def keep_link(stdin: asyncio.StreamWriter, frames: FrameInbox, silence: float) -> None:
    """Send a Heartbeat every third of ``silence`` seconds and return once nothing has come
    from the child for ``silence`` seconds (the link is dead, or silent, which is the same)."""
    beat = time.monotonic()
    while (now := time.monotonic()) - frames.last_heard < silence:
        if now >= beat:
            if not stdin.is_closing():  # no drain: a dead link must not stop the watch
                stdin.write(encode_frame(Heartbeat()))
            beat = now + silence / 3
        await asyncio.sleep(min(beat, frames.last_heard + silence) - now)
