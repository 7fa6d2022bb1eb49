"""Ending a child and everything it started.

A child runs in its own session (``start_new_session``); its bash commands run
in process groups of their own inside that session. Ending a child therefore
signals its process group, then every process left in its session, then every
process carrying its tag (one that left the session with ``setsid``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from child.proc import find_processes


def signal_session(sid: int, sig: signal.Signals, tag: str = "") -> None:
    """Send ``sig`` to process group ``sid``, every process of session ``sid`` and every
    process tagged ``tag`` (one that left the session with setsid)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, sig)
    for pid in find_processes(session=sid, tag=tag):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


async def exited(process: asyncio.subprocess.Process, seconds: float, poll: float = 0.02) -> bool:
    """Whether the process exits within ``seconds``.

    ``process.wait()`` would also wait for its pipes, which a grandchild may hold forever.
    """
    deadline = asyncio.get_running_loop().time() + seconds
    while process.returncode is None and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(poll)
    return process.returncode is not None


async def end_session(process: asyncio.subprocess.Process, tag: str, grace: float = 2.0) -> None:
    """TERM the child's session, give it ``grace`` seconds, then KILL whatever is left.

    The /proc scans run in a thread: they take milliseconds the event loop should not lose.
    """
    if process.returncode is None:
        await asyncio.to_thread(signal_session, process.pid, signal.SIGTERM, tag)
        await exited(process, grace)
    await asyncio.to_thread(signal_session, process.pid, signal.SIGKILL, tag)
    await exited(process, grace)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
