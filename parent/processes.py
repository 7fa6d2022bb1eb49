"""Ending a child and everything it started.

A child runs in its own session (``start_new_session``); its bash commands run
in process groups of their own inside that session. Ending a child therefore
signals its process group and then every process left in its session.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path


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


def signal_session(sid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group ``sid`` and to every process of session ``sid``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, sig)
    for pid in session_members(sid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


async def end_session(process: asyncio.subprocess.Process, grace: float = 2.0) -> None:
    """TERM the child's session, give it ``grace`` seconds, then KILL whatever is left."""
    sid = process.pid
    if process.returncode is None:
        signal_session(sid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), grace)
    signal_session(sid, signal.SIGKILL)
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
