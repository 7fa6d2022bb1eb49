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
from pathlib import Path

from child.channel import tagged_processes


def session_members(sid: int) -> list[int]:
    """Pids whose session id is ``sid`` (Linux /proc; empty elsewhere)."""
    pids = []
    for entry in Path("/proc").iterdir() if Path("/proc/self/stat").exists() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # fields after the command name, which is in parentheses and may hold spaces
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 3 and int(fields[3]) == sid:
            pids.append(int(entry.name))
    return pids


def signal_session(sid: int, sig: signal.Signals, tag: str = "") -> None:
    """Send ``sig`` to the process group ``sid``, every process of session ``sid`` and
    every process tagged ``tag``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, sig)
    for pid in session_members(sid) + (tagged_processes(tag) if tag else []):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


async def end_session(
    process: asyncio.subprocess.Process, tag: str = "", grace: float = 2.0
) -> None:
    """TERM the child's session, give it ``grace`` seconds, then KILL whatever is left."""
    sid = process.pid
    if process.returncode is None:
        signal_session(sid, signal.SIGTERM, tag)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), grace)
    signal_session(sid, signal.SIGKILL, tag)
    if process.returncode is None:
        await process.wait()


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
