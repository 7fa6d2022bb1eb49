"""isoagent against what a user would pick instead, measured in the same run, interleaved.

- in-process: one Python process, asyncio, one ``AsyncAnthropic`` client, a coroutine per
  task making the same calls and running the same ``bash`` commands (``bench.inprocess``);
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
PROMPT = "Run `true` with bash, then say done."


def one_bash_call(latency: float = 0.0) -> Callable[[Request], Reply]:
    """A task: one bash call running ``true``, then the answer; each reply ``latency`` late.
    Claude Code's tool is ``Bash``, ours ``bash``."""

    def answer(request: Request) -> Reply:
        if request.turn == 0:
            name = "Bash" if "Bash" in request.tool_names else "bash"
            return tool_reply(name, {"command": "true"}, delay=latency)
        return text_reply("done", delay=latency)

    return answer


@dataclass
class Used:
    wall: float  # seconds
    cpu: float  # user + sys seconds of the process and every descendant it waited for


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
    return Used(wall, usage.ru_utime + usage.ru_stime)


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
    runs: dict[str, list[Used]] = {k: [] for k in ("iso", "iso2", "ref", "ref2", "idle", "idle2")}
    with MessagesServer(one_bash_call()) as server:
        for _ in range(repeats):
            runs["iso"].append(isoagent_batch(server, tasks, jobs))
            runs["ref"].append(in_process(server, tasks, jobs))
            runs["iso2"].append(isoagent_batch(server, 2 * tasks, jobs))
            runs["ref2"].append(in_process(server, 2 * tasks, jobs))
        with idle_processes(idle):
            for _ in range(repeats):
                runs["idle"].append(isoagent_batch(server, tasks, jobs))
                runs["idle2"].append(isoagent_batch(server, 2 * tasks, jobs))
    iso = _marginal(runs["iso"], runs["iso2"], tasks)
    ref = _marginal(runs["ref"], runs["ref2"], tasks)
    crowded = _marginal(runs["idle"], runs["idle2"], tasks)
    how = (
        f"zero-latency server; a task is one `bash` call running `true`, then the answer. "
        f"(CPU of a {2 * tasks}-task run - CPU of a {tasks}-task run) / {tasks}, pairwise, of "
        "the whole process tree (wait4): start-up and the SDK import cancel out."
    )
    return [
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
        Line(
            "task CPU",
            f"the same with {idle:,} other idle processes running",
            crowded,
            f"{crowded.median / iso.median:.2f}x without them",
            "≤ 1.2x without",
            crowded.median <= 1.2 * iso.median,
        ),
    ]


def one_shot(runs: int, skipped: list[str]) -> list[Line]:
    """``isoagent task`` end to end against ``claude -p`` and v0, wall and CPU, interleaved."""
    claude, why = claude_cli()
    if claude is None:
        skipped.append(why)
    samples: dict[str, list[Used]] = {"iso": [], "claude": [], "v0": []}
    with MessagesServer(one_bash_call()) as server, tempfile.TemporaryDirectory() as tmp:
        work, home = Path(tmp) / "work", Path(tmp) / "home"
        work.mkdir()
        home.mkdir()
        iso_argv = [sys.executable, str(SCRIPT), "task", PROMPT]
        claude_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": server.base_url,
            "ANTHROPIC_API_KEY": "bench-key",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        for i in range(runs + 1):  # the first round warms the page cache and is not counted
            iso = timed(iso_argv, cli_env(server, HOME=str(home)), work, "done")
            v0 = in_process(server, 1, 1)
            cc = None
            if claude is not None:
                argv = [str(claude), "-p", PROMPT, "--allowedTools", "Bash"]
                cc = timed(argv, claude_env, work, "done")
            if i:
                samples["iso"].append(iso)
                samples["v0"].append(v0)
                if cc is not None:
                    samples["claude"].append(cc)
    lines = []
    for what, unit in (("wall", "wall"), ("cpu", "CPU")):
        mine = Stat([getattr(u, what) for u in samples["iso"]], "s")
        versus, met, notes = "", None, []
        if samples["claude"]:
            theirs = Stat([getattr(u, what) for u in samples["claude"]], "s")
            pairs = [
                getattr(a, what) / getattr(b, what)
                for a, b in zip(samples["iso"], samples["claude"], strict=True)
            ]
            versus = f"{statistics.median(pairs):.2f}x `claude -p`"
            met = statistics.median(pairs) <= 1.0
        lines.append(
            Line(
                "one-shot",
                f"`isoagent task` end to end, {unit} (one bash call, then the answer)",
                mine,
                versus,
                "≤ 1.0x `claude -p`",
                met,
                notes=notes,
            )
        )
        if samples["claude"]:
            lines.append(
                reference(
                    "one-shot",
                    f"`claude -p` ({_version(claude)}), {unit}, same server and task",
                    theirs,
                )
            )
        v0 = Stat([getattr(u, what) for u in samples["v0"]], "s")
        lines.append(
            reference("one-shot", f"v0: one process imports the SDK and calls the API, {unit}", v0)
        )
    lines[0].notes.append(
        "Zero-latency server. Claude Code: HOME of its own, "
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1, `--allowedTools Bash`; it makes two "
        "model calls for this task, as isoagent does. Ratios are the median of run-by-run pairs."
    )
    return lines


def _version(claude: Path | None) -> str:
    version = claude.parent / "claude.version" if claude is not None else None
    if version is not None and version.is_file():
        return f"Claude Code {version.read_text().split()[0]}"
    return "Claude Code"
