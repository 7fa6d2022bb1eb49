"""How a child process is started: its command, its environment, and the plain way to start it
(fork and exec). The faster way, forking from a preloaded server, is ``forkserver``."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import isoagent.child
from isoagent.child.identity import DEPTH_VARIABLE, allowed_environment, identity_environment
from isoagent.parent.children.forkserver import ForkServer
from isoagent.parent.children.process import ChildPipes, ChildProcess, attach
from isoagent.protocol import Identity

PACKAGE_ROOT = Path(isoagent.child.__file__).resolve().parent.parent  # a cwd outside any workspace
# -E -s -P: no PYTHON* variables, no user site, and not the working directory on sys.path
# (a workspace could hold a folder named isoagent)
CHILD_COMMAND = [sys.executable, "-E", "-s", "-P", "-m", "isoagent.child"]
FORK_SERVER_COMMAND = [*CHILD_COMMAND[:-1], "isoagent.child.forkserver"]
FORK_SERVER_VARIABLE = "ISOAGENT_FORK_SERVER"  # 0: start every child with fork and exec


def nesting_depth(environ: Mapping[str, str] = os.environ) -> int:
    """How many isoagent parents this process runs under (0: none)."""
    return int(environ.get(DEPTH_VARIABLE, "0") or 0)


def child_identity(tag: str, environ: Mapping[str, str] = os.environ, **more: str) -> Identity:
    """A child's identity: ``tag`` (unique while it lives: it finds what the child started),
    one level deeper than this process."""
    return Identity(tag=tag, depth=nesting_depth(environ) + 1, **more)


def child_environment(tmpdir: str, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """A local child's whole environment: an allow-list, never a key or a token, and its
    identity (the same as its Task's); its tag is its temporary folder."""
    env = allowed_environment(environ)
    env.update(identity_environment(child_identity(tmpdir, environ), tmpdir))
    return env


_given: list[ForkServer] = []  # the warm daemon's, given to the session process it forked


def give_fork_server(server: ForkServer) -> None:
    """The fork server this process's next session uses: a warm daemon's, already loaded."""
    _given[:] = [server]


def fork_server_for(child_command: list[str] | None) -> ForkServer | None:
    """A session's fork server (not started yet, unless the warm daemon gave this process
    one), or None: children from ISOAGENT_CHILD_COMMAND, or ISOAGENT_FORK_SERVER=0, are
    started with fork and exec."""
    if child_command or os.environ.get(FORK_SERVER_VARIABLE, "1").strip() == "0":
        return None
    if _given:
        return _given.pop()
    return ForkServer(FORK_SERVER_COMMAND, cwd=PACKAGE_ROOT, env=allowed_environment())


async def exec_child(argv: Sequence[str], *, cwd: Path, env: dict[str, str]) -> ChildProcess:
    """Start ``argv`` as a child in a session of its own, the plain way (fork and exec)."""
    pipes = ChildPipes()
    try:
        stdin, stdout, stderr = pipes.child_ends
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            cwd=cwd,
            env=env,
        )
        pipes.close_child_ends()
        return await attach(process.pid, pipes, asyncio.ensure_future(process.wait()))
    finally:
        pipes.close()  # whatever is still ours: all of it, if the start failed
