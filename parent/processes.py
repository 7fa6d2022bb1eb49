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
from parent.child_process import ChildProcess


def signal_session(sid: int, sig: signal.Signals, tag: str = "") -> None:
    """Send ``sig`` to process group ``sid``, every process of session ``sid`` and every
    process tagged ``tag`` (one that left the session with setsid)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, sig)
    for pid in find_processes(session=sid, tag=tag):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


async def end_session(process: ChildProcess, tag: str, grace: float = 2.0) -> None:
    """TERM the child's session, give it ``grace`` seconds, then KILL whatever is left.

    The /proc scans run in a thread: they take milliseconds the event loop should not lose.
    """
    if not process.has_exited:
        await asyncio.to_thread(signal_session, process.pid, signal.SIGTERM, tag)
        await process.wait_exit(grace)
    await asyncio.to_thread(signal_session, process.pid, signal.SIGKILL, tag)
    await process.wait_exit(grace)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
