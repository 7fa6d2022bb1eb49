"""The parent tools row: what the parent agent's file tools cost, run in its own process (as
they were) against its hands (one process a session under a writing child's sandbox,
forked by the session's fork server, or started as a command without one), and against a
process per call (what its bash commands get, ``confine_command``); and what a sweep of
planted names costs before each of the user's hooks.

CPU of every process involved: this one's (``process_time``); a forked hands' own, read
from its ``/proc/PID/schedstat`` as it ends (its fork server reaps it, not this process);
children this process reaps (``RUSAGE_CHILDREN``). A hands' per-call cost is the marginal
one, (a session of 2N calls - a session of N) / N; its per-session cost is a one-call
session less one call.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from io import FileIO
from pathlib import Path

from bench.stats import Line, Stat, reference
from isoagent.child.agent.builtin_agents import BUILTIN_AGENTS
from isoagent.child.agent.tools.base import ToolContext
from isoagent.child.agent.tools.files import Read
from isoagent.child.confine_command import Confinement, command_prefix
from isoagent.parent.agent.hands import Hands
from isoagent.parent.children.launch import child_environment
from isoagent.parent.children.planted import PlantedNames
from isoagent.parent.children.sandbox_policy import policy_for
from isoagent.parent.records.run_folder import RunFolder
from isoagent.parent.settings import Settings
from tests.support.fork_servers import fork_server_on_a_loop

CALL = {"file_path": "notes.txt"}  # a Read call: 200 short lines
SWEPT_FOLDERS = 1000  # the workspace the sweep row looks at


def _reaped() -> float:
    """CPU seconds of this process and of its children it has reaped."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _ran(pid: int) -> float:
    """CPU seconds process ``pid`` has run so far."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def row(calls: int, repeats: int) -> list[Line]:
    workspace = Path(tempfile.mkdtemp(prefix="isoagent-bench-"))
    temp = Path(tempfile.mkdtemp(prefix="isoagent-bench-tmp-"))
    try:
        (workspace / "notes.txt").write_text("".join(f"line {n}: some text\n" for n in range(200)))
        settings = Settings(workdir=workspace)
        policy = policy_for(BUILTIN_AGENTS["general-purpose"], settings)
        confinement = Confinement(policy, settings.limits, str(workspace), str(temp))
        env = child_environment(str(temp))
        tool = Read(ToolContext(workspace))
        never = threading.Event()

        def log() -> FileIO:
            return FileIO(temp / "hands.log", "ab")

        with fork_server_on_a_loop() as (server, loop):
            loop.call_soon_threadsafe(server.start)  # its start is no session's

            def forked(count: int) -> float:
                """CPU of a session of ``count`` calls by a forked hands."""
                hands = Hands(confinement, env, log, server, loop)
                before = time.process_time()
                ran = 0.0
                for _ in range(count):
                    assert not hands.run("Read", CALL, never).is_error
                    ran = _ran(hands.pid)
                hands.close()
                return time.process_time() - before + ran

            def started(count: int) -> float:
                """CPU of a session of ``count`` calls by a hands started as a command."""
                before = _reaped()
                hands = Hands(confinement, env, log)
                for _ in range(count):
                    assert not hands.run("Read", CALL, never).is_error
                hands.close()
                return _reaped() - before

            def per_process(count: int) -> float:
                before = _reaped()
                command = [*command_prefix(confinement), "cat", "notes.txt"]
                for _ in range(count):
                    subprocess.run(command, cwd=workspace, check=True, stdout=subprocess.DEVNULL)
                return (_reaped() - before) / count

            forked(1)  # the server's first fork faults its pages in: not a session's cost
            inline, marginal, once, command, process = [], [], [], [], []
            for _ in range(repeats):
                before = time.process_time()
                for _ in range(calls):
                    tool.run(CALL)
                inline.append((time.process_time() - before) / calls)
                marginal.append((forked(2 * calls) - forked(calls)) / calls)
                once.append(forked(1) - marginal[-1])
                command.append(started(1) - marginal[-1])
                process.append(per_process(max(calls // 20, 1)))
        sweep = _sweeps(workspace / "tree", repeats)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
        shutil.rmtree(temp, ignore_errors=True)
    us = [Stat([s * 1e6 for s in samples], "us") for samples in (inline, marginal, sweep)]
    ms = [Stat([s * 1e3 for s in samples], "ms") for samples in (once, command, process)]
    how = (
        "a `Read` call of a 200-line file; CPU of every process: this one, the hands "
        "(its schedstat), reaped children; a call: (a session of 2N calls - one of N) / N; "
        "a session: a one-call session less a call"
    )
    return [
        reference("parent tools", "a file-tool call in the parent's own process (before)", us[0]),
        Line(
            "parent tools",
            "a file-tool call run by the hands (a writing child's sandbox)",
            us[1],
            f"+{us[1].median - us[0].median:.0f} us a call",
            notes=[how],
        ),
        Line("parent tools", "the hands' start and end, forked by the fork server", ms[0]),
        Line("parent tools", "the same, started as a command (no fork server)", ms[1]),
        Line(
            "parent tools",
            "a call in a process of its own (`confine_command`, as the parent's bash)",
            ms[2],
            f"{ms[2].median * 1000 / us[1].median:.0f}x the hands' call",
        ),
        Line(
            "parent tools",
            f"the sweep of planted names before a hook, {SWEPT_FOLDERS:,} folders",
            us[2],
        ),
    ]


def _sweeps(tree: Path, repeats: int) -> list[float]:
    """CPU of a sweep (nothing planted) of a workspace of ``SWEPT_FOLDERS`` folders."""
    for n in range(SWEPT_FOLDERS):
        (tree / f"d{n // 100}" / f"e{n % 100}").mkdir(parents=True, exist_ok=True)
    runs = tree / ".isoagent" / "runs"
    runs.mkdir(parents=True)
    run = RunFolder.create(runs)
    planted = PlantedNames([tree], run)
    planted.snapshot()
    samples = []
    try:
        for _ in range(repeats):
            samples.append(_timed(lambda: planted.sweep(), 20))
    finally:
        run.close()
    return samples


def _timed(body: Callable[[], object], times: int) -> float:
    before = time.process_time()
    for _ in range(times):
        body()
    return (time.process_time() - before) / times
