"""Ending a child and everything it started.

A child runs in its own session (``start_new_session``); its bash commands run
in process groups of their own inside that session. Ending a child therefore
signals its process group, then every process left in its session, then every
process carrying its tag (one that left the session with ``setsid``).
"""

from __future__ import annotations

import signal

from isoagent.child.agent.proc import signal_name, signal_processes
from isoagent.parent.children.process import ChildProcess


async def end_session(
    process: ChildProcess, tag: str, born_after: int = 0, grace: float = 2.0
) -> None:
    """TERM the child's session, give it ``grace`` seconds, then KILL whatever is left.

    The /proc scans (about a millisecond each) run in the event loop: they are GIL-bound,
    so a thread would not overlap them with anything, only delay them by up to the
    interpreter's switch interval while the loop is busy. ``born_after``: the child's
    ``start_time``; older processes are not looked at.
    """
    if not process.has_exited:
        signal_processes(signal.SIGTERM, session=process.pid, tag=tag, born_after=born_after)
        await process.wait_exit(grace)
    signal_processes(signal.SIGKILL, session=process.pid, tag=tag, born_after=born_after)
    await process.wait_exit(grace)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by signal {signal_name(-code)}"
    return f"exit code {code}"
