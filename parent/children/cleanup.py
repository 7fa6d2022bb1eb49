"""Ending a child and everything it started.

A child is a subreaper and, where the machine allows, alone in cgroups of its own
(``cgroups``). Ending it: TERM its process group (the child then kills every
descendant it has and exits), a grace period, then KILL what is left: the whole
cgroup at once where there is one; otherwise every descendant found by walking
the process tree down from the child (a subreaper keeps orphans in that tree),
the child itself, and, last, whatever is left in its session or carries its tag
(a scan of every process: only without a cgroup).
"""

from __future__ import annotations

import contextlib
import os
import signal

from isoagent.child.agent.process_tree import end_descendants, signal_name, signal_processes
from isoagent.parent.children.cgroups import ChildCgroup
from isoagent.parent.children.process import ChildProcess


async def end_session(
    process: ChildProcess,
    tag: str,
    born_after: int = 0,
    grace: float = 2.0,
    cgroup: ChildCgroup | None = None,
) -> None:
    """TERM the child, give it ``grace`` seconds, then KILL whatever is left of it.

    ``born_after``: the child's ``start_time``; the fallback scan skips older processes.
    """
    if not process.has_exited:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        await process.wait_exit(grace)
    if cgroup is not None and await cgroup.end():
        await process.wait_exit(grace)
        return
    if not process.has_exited:  # its descendants first: an orphan would leave the tree
        end_descendants(process.pid)
    signal_processes(signal.SIGKILL, session=process.pid, tag=tag, born_after=born_after)
    await process.wait_exit(grace)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by signal {signal_name(-code)}"
    return f"exit code {code}"
