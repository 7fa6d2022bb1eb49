"""Children on other machines, started through an engine the user already runs.

The pool places each child on the host with the most free slots (the first listed on
a tie), never on one already tried for that task while another is up, and marks a
host down, once, after ``DOWN_AFTER`` launch failures in a row.

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
import sys
import tempfile
import time
from collections.abc import Collection, Mapping
from pathlib import Path

from isoagent.parent.children.connection import FrameInbox
from isoagent.parent.children.hosts import HostEntry
from isoagent.protocol import Heartbeat, encode_frame

DOWN_AFTER = 3  # launch failures in a row that take a host out of the run
HOST_FIELD = "{host}"
LINK_FAILED = 255  # ssh's exit code for its own failures: refused, unknown host, cut link
MASTER_WAIT = 10.0  # seconds a first child waits for its host's control master
MASTER_GRACE = 1.0


class LauncherError(ValueError):
    """A ``--launcher`` template that cannot be used."""


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
        self.command = [self._word(word) for word in command]
        own = any(w.lower().startswith(("controlpath", "controlmaster")) for w in self.words)
        self.multiplexes = self.is_ssh and self.places and not own
        self._masters: dict[str, subprocess.Popen[bytes]] = {}
        self._sockets: dict[str, str] = {}
        self._control_dir = ""

    def argv(self, host: HostEntry, server: float | None = None) -> list[str]:
        """The local command line that starts a child on ``host`` or, with ``server`` (its
        heartbeat), the host's host server."""
        words = self._words(host)
        if self.multiplexes and server is None:
            control = ["-o", "ControlMaster=no", "-o", f"ControlPath={self._socket(host)}"]
            words[1:1] = control  # no socket (yet): ssh connects on its own
        if server is None:
            return [*words, *self.command]
        command = [*self.command[:-1], self._word("isoagent.child.hostserver"), f"{server:g}"]
        return [*words, *command]

    def _word(self, word: str) -> str:
        return shlex.quote(word) if self.is_ssh else word

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


class NoHostLeft(Exception):
    """Every host that could take this task is down."""


class HostPool:
    """Free slots per host: ``acquire`` waits for one, ``release`` gives it back."""

    def __init__(self, entries: list[HostEntry]) -> None:
        self.entries = entries
        self._free = {entry.name: entry.slots for entry in entries}
        self._failures = dict.fromkeys(self._free, 0)  # launch failures in a row
        self.down: set[str] = set()
        self._changed = asyncio.Event()

    @property
    def slots(self) -> int:
        return sum(entry.slots for entry in self.entries)

    async def acquire(self, tried: Collection[str] = ()) -> HostEntry:
        """A host with a free slot, one not in ``tried`` while such a host is up;
        ``NoHostLeft`` when every host is down."""
        while True:
            up = [entry for entry in self.entries if entry.name not in self.down]
            if not up:
                raise NoHostLeft("every host is marked down")
            fresh = [entry for entry in up if entry.name not in tried] or up
            free = [entry for entry in fresh if self._free[entry.name] > 0]
            if free:
                best = max(free, key=lambda entry: self._free[entry.name])  # first on a tie
                self._free[best.name] -= 1
                return best
            self._changed.clear()
            await self._changed.wait()

    def release(self, host: HostEntry, launched: bool | None) -> None:
        """Give ``host``'s slot back. ``launched``: whether a launch there worked (None:
        nothing was launched, or the host is this machine)."""
        self._free[host.name] += 1
        if launched is True:
            self._failures[host.name] = 0
        elif launched is False:
            self._failures[host.name] += 1
            if self._failures[host.name] >= DOWN_AFTER and host.name not in self.down:
                self.down.add(host.name)
                print(
                    f"isoagent: host {host.name} marked down for this run after "
                    f"{DOWN_AFTER} failed launches in a row",
                    file=sys.stderr,
                )
        self._changed.set()


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
