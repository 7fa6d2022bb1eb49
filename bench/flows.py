"""Delegation overhead, batch throughput and parent memory, against the in-test server.

The in-test Messages API server is the tests' own (``tests.support.messages_server``)
and runs in this process; the parents run in processes of their own: a
``bench.driver`` for the delegation row, the real ``isoagent batch`` for the batch rows.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cli_start import SCRIPT
from bench.driver import WARMUP
from bench.references import Used, in_process
from bench.spawn import vm_hwm_mb
from bench.stats import Line, Stat, reference
from isoagent.child.agent.process_tree import STIME, UTIME, stat_fields
from isoagent.parent.children.launch import FORK_SERVER_VARIABLE, PACKAGE_ROOT
from tests.conftest import cli_env
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply

DRIVER_TIMEOUT = 300
PLAIN = {FORK_SERVER_VARIABLE: "0"}  # start every child with fork and exec: the comparison


def two_turns(latency: float) -> Callable[[Request], Reply]:
    """Every task: one Bash call, then the answer; each reply ``latency`` seconds late."""

    def answer(request: Request) -> Reply:
        if request.first_user_text == WARMUP:
            return text_reply("ok")
        if request.turn == 0:
            return tool_reply("Bash", {"command": "echo hi"}, delay=latency)
        return text_reply("done", delay=latency)

    return answer


def _drive(server: MessagesServer, rounds: int, plain: bool = False) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.driver", str(rounds)],
        cwd=PACKAGE_ROOT,
        env=cli_env(server, **(PLAIN if plain else {})),
        capture_output=True,
        text=True,
        timeout=DRIVER_TIMEOUT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench.driver: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def _phases(runs: list[dict[str, float]]) -> str:
    return ", ".join(f"{k} {statistics.median(r[k] for r in runs):.1f} ms" for k in runs[0])


def delegation(rounds: int) -> list[Line]:
    with MessagesServer(two_turns(0.0)) as server:
        out = _drive(server, rounds)
        plain_out = _drive(server, rounds, plain=True)
    child = Stat([sum(r.values()) for r in out["child"]], "ms")
    in_process = Stat([sum(r.values()) for r in out["in_process"]], "ms")
    plain = Stat([sum(r.values()) for r in plain_out["child"]], "ms")
    extra = child.median - in_process.median
    return [
        Line(
            "delegation",
            "one `Agent` round trip in a child process (one Bash call, then the answer)",
            child,
            f"{extra:+.0f} ms over in-process",
            "≤ +60 ms",
            extra <= 60,
            notes=[
                "Supervisor.run of a real Session (SDK source, gateway, transcripts) against "
                "the in-test server with zero latency; parent in its own process "
                f"(bench.driver). Median phases, child: {_phases(out['child'])}; in-process: "
                f"{_phases(out['in_process'])}."
            ],
        ),
        reference(
            "delegation",
            "in-process: the agent loop with a fresh message list, same gateway and server",
            in_process,
        ),
        reference(
            "delegation",
            "the same round trip with plain spawning (`ISOAGENT_FORK_SERVER=0`)",
            plain,
            f"{plain.median - in_process.median:+.0f} ms over in-process; median phases: "
            f"{_phases(plain_out['child'])}",
        ),
    ]


@dataclass
class BatchSize:
    tasks: int
    jobs: int
    repeats: int
    plain: bool = False  # children started with fork and exec, not by the fork server
    # compared with the in-process reference at the same -j: the whole command's wall time
    # at most this many times the reference's (0: not compared)
    target: float = 0.0

    def ideal(self, latency: float) -> float:
        return math.ceil(self.tasks / self.jobs) * 2 * latency


@dataclass
class BatchRun:
    seconds: float  # the batch's own duration, from its final result event
    wall: float  # the whole command, start-up and SDK import included
    peak_children: int
    in_flight: int  # most model calls the server handled at once
    hwm_mb: float  # the CLI process's peak RSS
    parent_cpu: float  # the CLI's own CPU seconds from its session start to its end
    children_cpu: float  # CPU seconds of its children and theirs


def _own_cpu(pid: int) -> float:
    """CPU seconds (user + sys) a process has used itself; 0 once it is gone."""
    try:
        fields = stat_fields(pid)
    except OSError:
        return 0.0
    return (int(fields[UTIME]) + int(fields[STIME])) / os.sysconf("SC_CLK_TCK")


def _run_batch(latency: float, size: BatchSize) -> BatchRun:
    """One ``isoagent batch`` of two-turn tasks against a fresh server, watched from outside."""
    with (
        tempfile.TemporaryDirectory(prefix="isoagent-bench-") as tmp,
        MessagesServer(two_turns(latency)) as server,
    ):
        work = Path(tmp)
        lines = [{"id": f"t{i}", "prompt": f"batch task {i}"} for i in range(size.tasks)]
        (work / "tasks.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        argv = [sys.executable, str(SCRIPT), "batch", "tasks.jsonl", "-j", str(size.jobs)]
        argv += ["-o", "out.jsonl", "-C", str(work)]
        with (work / "stderr.log").open("wb") as stderr:
            started = time.perf_counter()
            env = cli_env(server, **(PLAIN if size.plain else {}))
            process = subprocess.Popen(
                argv, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=stderr
            )
        hwm = cpu = cpu_at_start = 0.0
        run_log: Path | None = None
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            hwm, cpu = max(hwm, vm_hwm_mb(process.pid)), max(cpu, _own_cpu(process.pid))
            if run_log is None:  # run.jsonl starts when the session does: after the SDK import
                run_log = next((work / ".isoagent" / "runs").glob("*/run.jsonl"), None)
                cpu_at_start = cpu
            time.sleep(0.05)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        run_log = run_log or next((work / ".isoagent" / "runs").glob("*/run.jsonl"), None)
        if process.returncode != 0 or run_log is None:
            log = (work / "stderr.log").read_text()[-2000:]
            raise RuntimeError(f"isoagent batch exited {process.returncode}: {log}")
        records = [json.loads(line) for line in (work / "out.jsonl").read_text().splitlines()]
        if len(records) != size.tasks or any(r["status"] != "ok" for r in records):
            raise RuntimeError(f"isoagent batch: not every task ok: {records[:3]}")
        events = [json.loads(line) for line in run_log.read_text().splitlines()]
        return BatchRun(
            seconds=next(e["result"]["duration"] for e in events if e["type"] == "result"),
            wall=wall,
            peak_children=_most_alive(events),
            in_flight=server.max_in_flight,
            hwm_mb=hwm,
            parent_cpu=cpu - cpu_at_start,
            children_cpu=usage.ru_utime + usage.ru_stime - cpu,
        )


def _most_alive(events: list[dict[str, Any]]) -> int:
    alive = most = 0
    for event in events:
        alive += {"child_started": 1, "child_result": -1}.get(event["type"], 0)
        most = max(most, alive)
    return most


def _per_task(runs: list[BatchRun], cpu: Callable[[BatchRun], float], tasks: int) -> str:
    return f"{statistics.median(cpu(r) for r in runs) / tasks * 1000:.0f}"


def _in_process(latency: float, size: BatchSize) -> Used:
    with MessagesServer(two_turns(latency)) as server:
        return in_process(server, size.tasks, size.jobs)


def batch(sizes: list[BatchSize], latency: float) -> list[Line]:
    """A line per size; and the parent's peak RSS at the largest ``-j`` against ``-j 1``."""
    lines = []
    peaks: dict[int, list[BatchRun]] = {}
    for size in sizes:
        runs: list[BatchRun] = []
        refs: list[Used] = []
        for _ in range(size.repeats):  # interleaved, so that load from elsewhere hits both
            runs.append(_run_batch(latency, size))
            if size.target:
                refs.append(_in_process(latency, size))
        if not size.plain:
            peaks[size.jobs] = runs
        wall = Stat([r.wall for r in runs], "s")
        ideal = size.ideal(latency)
        took = statistics.median(r.seconds for r in runs)
        how = ", plain spawning (`ISOAGENT_FORK_SERVER=0`)" if size.plain else ""
        versus, met = f"{took / ideal:.2f}x ideal ({ideal:g} s), batch phase only", None
        if refs:
            ratio = statistics.median(r.wall / ref.wall for r, ref in zip(runs, refs, strict=True))
            versus, met = f"{ratio:.2f}x in-process", ratio <= size.target
        lines.append(
            Line(
                "batch",
                f"`isoagent batch`, {size.tasks} tasks, `-j {size.jobs}`, "
                f"{latency * 1000:.0f} ms per model call, whole command{how}",
                wall,
                versus,
                f"≤ {size.target:.2f}x in-process" if size.target else "",
                met,
                notes=[
                    f"The batch phase alone (its final result event) took {took:.2f} s, "
                    f"{took / ideal:.2f}x the ideal {ideal:g} s. Most model calls in "
                    f"flight at once: {max(r.in_flight for r in runs)}; most children alive: "
                    f"{max(r.peak_children for r in runs)}; CPU per task: parent "
                    f"{_per_task(runs, lambda r: r.parent_cpu, size.tasks)} ms, children "
                    f"{_per_task(runs, lambda r: r.children_cpu, size.tasks)} ms. "
                    "The in-process reference runs the same tasks at the same -j "
                    "(`bench.inprocess`); the ratio is the median of run-by-run pairs."
                ],
            )
        )
        if refs:
            lines.append(
                reference(
                    "batch",
                    f"in-process, {size.tasks} tasks, `-j {size.jobs}`, same server",
                    Stat([r.wall for r in refs], "s"),
                )
            )
    most, least = max(peaks), min(peaks)
    hwm = Stat([r.hwm_mb for r in peaks[most]], "MB")
    base = statistics.median(r.hwm_mb for r in peaks[least])
    lines += [
        Line(
            "memory",
            f"parent (`isoagent batch`) peak RSS with "
            f"{max(r.peak_children for r in peaks[most])} live children",
            hwm,
            f"+{hwm.median - base:.1f} MB over `-j {least}`",
            notes=[
                "VmHWM of the `isoagent batch` process, polled every 50 ms, in the batch "
                "runs above."
            ],
        ),
        reference(
            "memory",
            f"parent (`isoagent batch`) peak RSS at `-j {least}`",
            Stat([r.hwm_mb for r in peaks[least]], "MB"),
        ),
    ]
    return lines
