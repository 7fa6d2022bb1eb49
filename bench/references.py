"""isoagent against what a user would pick instead, measured in the same run, interleaved.

- in-process: one Python process, asyncio, one ``AsyncAnthropic`` client, a coroutine per
  task making the same calls and running the same ``Bash`` commands (``bench.inprocess``);
- Claude Code: ``claude -p``, the CLI bundled in the ``claude-agent-sdk`` package
  (in the ``test`` extra), in its leanest mode: a HOME of its own and
  ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``;
- v0: one Python process per task that imports the SDK and calls the API itself
  (``bench.inprocess`` with one task).

Every process runs against the same in-test Messages API server, which runs in this process;
CPU is the whole process tree's (``wait4``), the server's excluded.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.cli_start import SCRIPT
from bench.stats import Line, Stat, reference
from isoagent.parent.children.launch import PACKAGE_ROOT
from tests.conftest import cli_env
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply

TIMEOUT = 600
PROMPT = "Run `true` with Bash, then say done."


def one_bash_call(latency: float = 0.0) -> Callable[[Request], Reply]:
    """A task: one Bash call running ``true``, then the answer; each reply ``latency`` late
    (Claude Code's tool and isoagent's have one name)."""

    def answer(request: Request) -> Reply:
        if request.turn == 0:
            return tool_reply("Bash", {"command": "true"}, delay=latency)

        return text_reply("done", delay=latency)

    return answer


@dataclass
class Used:
    wall: float  # seconds
    cpu: float  # user + sys seconds of the process and every descendant it waited for
    stdout: str = ""


def timed(argv: list[str], env: dict[str, str], cwd: Path, expect: str = "") -> Used:
    """Run ``argv`` to its end; fail loudly if it fails or its stdout lacks ``expect``."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err
        )
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0 or expect not in stdout:
        raise RuntimeError(
            f"{argv[:3]} exited {os.waitstatus_to_exitcode(status)}: {stderr[-2000:]}"
        )
    return Used(wall, usage.ru_utime + usage.ru_stime, stdout)


def isoagent_batch(server: MessagesServer, tasks: int, jobs: int) -> Used:
    """``isoagent batch`` of ``tasks`` prompts, ``-j jobs``; every task must end ok."""
    with tempfile.TemporaryDirectory(prefix="isoagent-bench-") as tmp:
        work = Path(tmp)
        lines = [{"id": f"t{i}", "prompt": f"batch task {i}"} for i in range(tasks)]
        (work / "tasks.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        argv = [
            sys.executable,
            str(SCRIPT),
            "batch",
            "tasks.jsonl",
            "-j",
            str(jobs),
            "-o",
            "out.jsonl",
        ]
        used = timed(argv, cli_env(server, HOME=tmp), work)
        records = [json.loads(line) for line in (work / "out.jsonl").read_text().splitlines()]
    if len(records) != tasks or any(r["status"] != "ok" for r in records):
        raise RuntimeError(f"isoagent batch: not every task ok: {records[:3]}")
    return used


def in_process(server: MessagesServer, tasks: int, jobs: int) -> Used:
    """The in-process reference: ``tasks`` coroutines in one process, ``jobs`` at a time."""
    argv = [sys.executable, "-m", "bench.inprocess", str(tasks), str(jobs)]
    return timed(argv, cli_env(server), PACKAGE_ROOT)


def claude_cli() -> tuple[Path | None, str]:
    """The ``claude`` CLI bundled in the claude-agent-sdk package, or why there is none."""
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is None or not spec.submodule_search_locations:
        return None, "Claude Code: claude-agent-sdk is not installed (pip install -e '.[test]')"
    path = Path(next(iter(spec.submodule_search_locations))) / "_bundled" / "claude"
    if not os.access(path, os.X_OK):
        return None, f"Claude Code: claude-agent-sdk has no bundled CLI at {path}"
    return path, ""


def claude_environment(server: MessagesServer, home: Path) -> dict[str, str]:
    """``claude -p``'s environment: its leanest mode, against ``server``."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": server.base_url,
        "ANTHROPIC_API_KEY": "bench-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


@contextmanager
def idle_processes(count: int) -> Iterator[None]:
    """``count`` sleeping processes for the duration; all ended and reaped after it."""
    sleepers: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            sleepers.append(subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL))
        yield
    finally:
        for sleeper in sleepers:
            sleeper.kill()
        for sleeper in sleepers:
            sleeper.wait()


def _marginal(small: list[Used], large: list[Used], tasks: int) -> Stat:
    """CPU ms per task beyond start-up: a batch of 2N tasks less one of N, divided by N."""
    return Stat([(b.cpu - a.cpu) / tasks * 1000 for a, b in zip(small, large, strict=True)], "ms")


def task_cpu(tasks: int, jobs: int, repeats: int, idle: int) -> list[Line]:
    """Marginal CPU per task of ``isoagent batch -j jobs`` against the in-process reference;
    then the same for isoagent with ``idle`` other processes running."""
    runs: dict[str, list[Used]] = {k: [] for k in ("iso", "iso2", "ref", "idle", "idle2")}
    with MessagesServer(one_bash_call()) as server:
        for _ in range(repeats):
            runs["iso"].append(isoagent_batch(server, tasks, jobs))
            runs["ref"].append(in_process(server, 2 * tasks, jobs))
            runs["iso2"].append(isoagent_batch(server, 2 * tasks, jobs))
        if idle:
            with idle_processes(idle):
                for _ in range(repeats):
                    runs["idle"].append(isoagent_batch(server, tasks, jobs))
                    runs["idle2"].append(isoagent_batch(server, 2 * tasks, jobs))
    iso = _marginal(runs["iso"], runs["iso2"], tasks)
    ref = Stat(
        [(r.cpu - json.loads(r.stdout)["setup_cpu"]) / (2 * tasks) * 1000 for r in runs["ref"]],
        "ms",
    )
    how = (
        f"zero-latency server; a task is one `Bash` call running `true`, then the answer. "
        f"isoagent: (CPU of a {2 * tasks}-task run - CPU of a {tasks}-task run) / {tasks}, "
        "pairwise, of the whole process tree (wait4): start-up and the SDK import cancel out. "
        f"In-process: a {2 * tasks}-task run's CPU (wait4) less what it had spent when its "
        "first task started (the SDK import, the client), per task: one process has no "
        "start-up noise to cancel, and a difference of two runs was dominated by it."
    )
    lines = [
        Line(
            "task CPU",
            f"marginal CPU per task, `isoagent batch -j {jobs}`, all processes",
            iso,
            f"{iso.median / ref.median:.2f}x in-process",
            "≤ 1.5x in-process",
            iso.median <= 1.5 * ref.median,
            notes=[f"CLI, fork server, children and their commands; {how}"],
        ),
        reference(
            "task CPU",
            f"in-process: one `AsyncAnthropic`, coroutines, `-j {jobs}` (`bench.inprocess`)",
            ref,
        ),
    ]
    if not idle:
        return lines
    crowded = _marginal(runs["idle"], runs["idle2"], tasks)
    return [
        *lines,
        Line(
            "task CPU",
            f"the same with {idle:,} other idle processes running",
            crowded,
            f"{crowded.median / iso.median:.2f}x without them",
            "≤ 1.2x without",
            crowded.median <= 1.2 * iso.median,
        ),
    ]


@contextmanager
def warm_gateway(env: dict[str, str]) -> Iterator[None]:
    """The warm daemon (and its gateway) for ``env``'s configuration, listening, for the
    duration; ended after (its gateway and fork server leave with it)."""
    from isoagent.parent.model import warm

    gateway = subprocess.Popen(
        [sys.executable, "-P", "-m", "isoagent.parent.daemon"],
        env={**env, warm.IDLE_VARIABLE: "3600"},
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not warm._answers(warm.address(env)):
            if gateway.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the warm gateway did not start")
            time.sleep(0.02)
        yield
    finally:
        gateway.kill()
        gateway.wait()


def one_shot(runs: int, warmup: bool, skipped: list[str]) -> list[Line]:
    """``isoagent task`` end to end, with a warm gateway and without, against ``claude -p``
    and v0: wall and CPU, interleaved, against one server."""
    claude, why = claude_cli()
    if claude is None:
        skipped.append(why)
    samples: dict[str, list[Used]] = {"warm": [], "cold": [], "claude": [], "v0": []}
    with MessagesServer(one_bash_call()) as server, tempfile.TemporaryDirectory() as tmp:
        work, home = Path(tmp) / "work", Path(tmp) / "home"
        work.mkdir()
        home.mkdir()
        task = [sys.executable, str(SCRIPT), "task", PROMPT]
        cold_env = cli_env(server, HOME=str(home))
        warm_env = {**cold_env, "ISOAGENT_WARM_GATEWAY": "1"}
        claude_env = claude_environment(server, home)
        with warm_gateway(warm_env):
            for i in range(1 - warmup, runs + 1):  # round 0 warms the page cache: not counted
                round = {
                    "warm": timed(task, warm_env, work, "done"),
                    "cold": timed(task, cold_env, work, "done"),
                    "v0": in_process(server, 1, 1),
                }
                if claude is not None:
                    argv = [str(claude), "-p", PROMPT, "--allowedTools", "Bash"]
                    round["claude"] = timed(argv, claude_env, work, "done")
                for name, used in round.items():
                    if i:
                        samples[name].append(used)
    lines = []
    for what in ("wall", "cpu"):
        unit = {"wall": "wall", "cpu": "CPU"}[what]
        stats = {
            name: Stat([getattr(u, what) for u in used], "s")
            for name, used in samples.items()
            if used
        }

        warm_versus, warm_met = _versus(samples, "warm", what)
        lines.append(
            Line(
                "one-shot",
                f"`isoagent task`, warm daemon running (a thin client of it), {unit}",
                stats["warm"],
                warm_versus,
                "≤ 1.0x `claude -p`",
                warm_met,
            )
        )
        cold_versus, _ = _versus(samples, "cold", what)
        lines.append(
            Line(
                "one-shot",
                f"`isoagent task`, no warm gateway (`ISOAGENT_WARM_GATEWAY=0`), {unit}",
                stats["cold"],
                cold_versus,
            )
        )
        if "claude" in stats:
            lines.append(
                reference("one-shot", f"`claude -p` ({_version(claude)}), {unit}", stats["claude"])
            )
        lines.append(
            reference(
                "one-shot",
                f"v0: one process imports the SDK and calls the API, {unit}",
                stats["v0"],
            )
        )
    lines[0].notes.append(
        "A task is one Bash call running `true`, then the answer; zero-latency server; the "
        "runs take turns. Warm: a daemon started before the runs (`python -m "
        "isoagent.parent.daemon`): each run is a thin client of it, and no run imports the "
        "SDK. Claude Code: HOME of its "
        "own, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1, `--allowedTools Bash`; it makes two "
        "model calls for the task, as isoagent does. Ratios: the median of run-by-run pairs."
    )
    return lines


def _versus(samples: dict[str, list[Used]], name: str, what: str) -> tuple[str, bool | None]:
    """``name`` against ``claude -p`` in ``what`` (wall or cpu): the median of pairs."""
    if not samples["claude"]:
        return "", None
    pairs = [
        getattr(a, what) / getattr(b, what)
        for a, b in zip(samples[name], samples["claude"], strict=True)
    ]
    ratio = statistics.median(pairs)
    return f"{ratio:.2f}x `claude -p`", ratio <= 1.0


def _version(claude: Path | None) -> str:
    version = claude.parent / "claude.version" if claude is not None else None
    if version is not None and version.is_file():
        return f"Claude Code {version.read_text().split()[0]}"
    return "Claude Code"
