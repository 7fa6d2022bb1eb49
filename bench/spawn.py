"""Child start and child memory: the child against the interpreter floor and the naive design.

Every variant is started the way the supervisor starts a child (same interpreter
flags, allow-listed environment, cwd, own session), and the variants take turns
so that load from other processes on the machine hits them alike.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable

from bench.stats import Line, Stat, ratio, reference
from isoagent.child.agent.builtin_agents import BUILTIN_AGENTS
from isoagent.parent.children.forkserver import ForkServer
from isoagent.parent.children.launch import (
    CHILD_COMMAND,
    FORK_SERVER_COMMAND,
    PACKAGE_ROOT,
    allowed_environment,
    child_environment,
    exec_child,
)
from isoagent.parent.children.process import ChildProcess
from isoagent.protocol import (
    ChildFrame,
    FrameReader,
    FrameWriter,
    Hello,
    ModelCall,
    ModelReply,
    Result,
    Task,
    TextBlock,
    ToolUseBlock,
)

CHILD = tuple(CHILD_COMMAND)
FLAGS = CHILD[: CHILD.index("-m")]  # the interpreter and its flags
# The references say they are ready with one byte, as the child does with Hello, and then
# wait for stdin to close, as the child waits for its Task.
READY = "os.write(1, b'.'); os.read(0, 1)"
FLOOR = (*FLAGS, "-c", f"import msgspec, os; {READY}")
BARE = (*FLAGS, "-c", f"import os; {READY}")
NAIVE = (
    *FLAGS,
    "-c",
    "import anthropic; from isoagent.child.main import main; raise SystemExit(main())",
)


async def _time_to_ready(argv: tuple[str, ...], says_hello: bool) -> float:
    """Seconds from spawn until the process's first frame (or byte) arrives. A process that
    says Hello is started and read as the supervisor does it (``exec_child``)."""
    if says_hello:
        return await _time_to_hello(
            lambda env: exec_child(argv, cwd=PACKAGE_ROOT, env=env), argv[-1]
        )
    with tempfile.TemporaryDirectory(prefix="isoagent-bench-") as tmp:
        started = time.perf_counter()
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            cwd=PACKAGE_ROOT,
            env=child_environment(tmp),
        )
        assert process.stdout is not None and process.stdin is not None
        await process.stdout.readexactly(1)
        elapsed = time.perf_counter() - started
        process.stdin.close()  # it exits on stdin EOF
        await process.wait()
    return elapsed


async def _time_to_hello(
    start: Callable[[dict[str, str]], Awaitable[ChildProcess]], what: str
) -> float:
    """Seconds from ``start(environment)`` until the child's Hello is read; then it ends."""
    with tempfile.TemporaryDirectory(prefix="isoagent-bench-") as tmp:
        env = child_environment(tmp)
        started = time.perf_counter()
        child = await start(env)
        frame = await child.frames.next()
        elapsed = time.perf_counter() - started
        if not isinstance(frame, Hello):
            raise RuntimeError(f"{what}: expected Hello, got {frame!r:.80}")
        child.stdin.close()  # the child exits on stdin EOF
        await child.wait_exit(10)
        child.close_pipes()
    return elapsed


async def _time_to_hello_forked(server: ForkServer) -> float:
    """Seconds from a request to the fork server until the forked child's Hello is read."""
    return await _time_to_hello(lambda env: server.spawn(env, PACKAGE_ROOT), "forked child")


async def _start_samples(runs: int, naive_runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"child": [], "forked": [], "floor": [], "naive": []}
    server = ForkServer(FORK_SERVER_COMMAND, cwd=PACKAGE_ROOT, env=allowed_environment())
    try:
        await _time_to_hello_forked(server)  # starts the server; not counted
        for argv, says_hello in ((CHILD, True), (FLOOR, False), (NAIVE, True)):
            await _time_to_ready(argv, says_hello)  # warm the page cache; not counted
        for i in range(runs):
            samples["child"].append(await _time_to_ready(CHILD, True) * 1000)
            samples["forked"].append(await _time_to_hello_forked(server) * 1000)
            samples["floor"].append(await _time_to_ready(FLOOR, False) * 1000)
            if i < naive_runs:
                samples["naive"].append(await _time_to_ready(NAIVE, True) * 1000)
    finally:
        server.close()
    return samples


def child_start(runs: int, naive_runs: int) -> list[Line]:
    samples = asyncio.run(_start_samples(runs, naive_runs))
    child, forked, floor, naive = (
        Stat(samples[k], "ms") for k in ("child", "forked", "floor", "naive")
    )
    return [
        Line(
            "child start",
            "forked by the session's fork server (`parent/children/forkserver.py`), request until "
            "`Hello` is read",
            forked,
            ratio(forked, floor, "floor"),
            "≤ 1.5x floor",
            forked.median <= 1.5 * floor.median,
            notes=[
                "What the supervisor does by default: ForkServer.spawn (pipes made by the "
                "parent and passed with SCM_RIGHTS, fork, setsid, the child's environment "
                "and cwd) and the Hello read from the new pipe. The server is started once, "
                "before the runs (its own start is about one plain spawn)."
            ],
        ),
        Line(
            "child start",
            "`python -m isoagent.child`, spawn until `Hello` is read (plain spawning, "
            "`ISOAGENT_FORK_SERVER=0`)",
            child,
            ratio(child, floor, "floor"),
            "≤ 1.5x floor",
            child.median <= 1.5 * floor.median,
            notes=[
                "parent.children.launch.exec_child, as the supervisor starts a child without "
                "the fork server (`-m isoagent.child`, its flags, environment, cwd, session); "
                "Hello read from ChildProcess.frames. Variants alternate run by run."
            ],
        ),
        reference("child start", 'floor: `python -c "import msgspec"` until its first byte', floor),
        reference(
            "child start",
            "naive: a child that also imports `anthropic`",
            naive,
            ratio(naive, floor, "floor"),
        ),
    ]


# --- memory ------------------------------------------------------------------


def _scripted_model(call: ModelCall) -> ModelReply:
    """Turn 0: one Bash call; turn 1: the answer."""
    if call.turn == 0:
        return ModelReply(0, [ToolUseBlock("toolu_bench", "Bash", {"command": "echo hi"})])
    return ModelReply(call.turn, [TextBlock("done")], "end_turn")


def vm_hwm_mb(pid: int) -> float:
    """Peak resident set of a process (VmHWM; reset by exec, unlike ru_maxrss); 0 once it exits."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0  # gone, or a zombie: its memory is released


def _peak_and_cpu(
    argv: tuple[str, ...], drive: Callable[[subprocess.Popen[bytes]], float]
) -> tuple[float, float]:
    """Peak RSS in MB (from ``drive``); CPU ms (user + sys, with its children) from wait4."""
    with tempfile.TemporaryDirectory(prefix="isoagent-bench-") as tmp:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd=PACKAGE_ROOT,
            env=child_environment(tmp),
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            peak = drive(process)
        finally:
            process.stdin.close()
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            process.stdout.close()
    return peak, (usage.ru_utime + usage.ru_stime) * 1000


def _one_task(process: subprocess.Popen[bytes]) -> float:
    """Be the parent for one task: Hello, Task, two model turns (one Bash call), Result.

    VmHWM is read each time the child waits for a model reply; the last such wait
    comes after its Bash call, just before it answers and exits.
    """
    assert process.stdin is not None and process.stdout is not None
    reader = FrameReader(process.stdout.fileno(), ChildFrame)
    writer = FrameWriter(process.stdin.fileno())
    if not isinstance(reader.read(), Hello):
        raise RuntimeError("the child did not say Hello")
    peak = 0.0
    with tempfile.TemporaryDirectory(prefix="isoagent-bench-") as work:
        agent = BUILTIN_AGENTS["general-purpose"]
        writer.write(Task("say hi with bash", agent, "claude-bench", work, work))
        while True:
            frame = reader.read()
            if isinstance(frame, ModelCall):  # the child is alive, waiting for the reply
                peak = max(peak, vm_hwm_mb(process.pid))
                writer.write(_scripted_model(frame))
            elif isinstance(frame, Result):
                if frame.status != "ok":
                    raise RuntimeError(f"bench child failed: {frame.error}")
                return peak
            elif frame is None:
                raise RuntimeError("the child exited before its Result")


def _when_ready(process: subprocess.Popen[bytes]) -> float:
    assert process.stdout is not None
    process.stdout.read(1)
    return vm_hwm_mb(process.pid)


def memory(runs: int) -> list[Line]:
    """Peak RSS and CPU time of one child task, next to the naive child and bare interpreters."""
    kinds = {"child": (CHILD, _one_task), "naive": (NAIVE, _one_task)}
    kinds |= {"floor": (FLOOR, _when_ready), "bare": (BARE, _when_ready)}
    rss: dict[str, list[float]] = {k: [] for k in kinds}
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(runs):
        for kind, (argv, drive) in kinds.items():
            peak, used = _peak_and_cpu(argv, drive)
            rss[kind].append(peak)
            cpu[kind].append(used)
    child, naive, floor, bare = (Stat(rss[k], "MB") for k in kinds)
    child_cpu, naive_cpu, floor_cpu = (Stat(cpu[k], "ms") for k in ("child", "naive", "floor"))
    return [
        Line(
            "memory",
            "peak RSS of one child (one task: a Bash call and an answer)",
            child,
            f"{ratio(child, naive, 'naive')}; +{child.median - floor.median:.1f} MB over floor",
            "≤ 25 MB",
            child.median <= 25,
            notes=[
                "VmHWM from /proc/<pid>/status, read while the child waits for its last "
                "model reply (after its Bash call). ru_maxrss is no use here: Linux carries "
                "the forking parent's peak across exec into it."
            ],
        ),
        reference("memory", "naive: a child that also imports `anthropic`, same task", naive),
        reference(
            "memory", 'floor: `python -c "import msgspec"`', floor, ratio(floor, naive, "naive")
        ),
        reference("memory", "`python -c pass`", bare, ratio(bare, naive, "naive")),
        Line(
            "CPU",
            "CPU time of one child task (user + sys, its bash included)",
            child_cpu,
            ratio(child_cpu, floor_cpu, "floor"),
            notes=[
                "From wait4. On 2 cores this bounds batch throughput: 64 children need at "
                "least 64 x this / 2 of wall time, before the parent's own work."
            ],
        ),
        reference("CPU", 'floor: `python -c "import msgspec"`', floor_cpu),
        reference("CPU", "naive child, same task", naive_cpu, ratio(naive_cpu, floor_cpu, "floor")),
    ]
