"""``batch --api-batches``: a fleet's turns as Message Batches, beside the normal mode.

The same ``isoagent batch`` of three-turn tasks (two Bash calls, then the answer), every
task at once (``-j`` = tasks), against the in-test server: once through ``/v1/messages``,
once with ``--api-batches``, whose Message Batches end a fixed delay after they are sent.
The row gives the Message Batches sent, the wall time, the tokens and what they cost (each
mode's tokens at its price: ``prices.cost_usd``, the batch's at ``BATCH_PRICE``); and what a
child waiting on a batch costs in memory, read from /proc while every child waits.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.cli_start import SCRIPT
from bench.stats import Line, Stat, reference
from isoagent.child.agent.process_tree import descendants
from isoagent.parent.model.prices import BATCH_PRICE, cost_usd
from isoagent.protocol import Usage
from tests.conftest import cli_env
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply

TURNS = 3
MODEL = "claude-sonnet-5"
USAGE = (2_000, 300)  # tokens in and out of each turn: what a small agent turn reads and says
LATENCY = 0.25  # seconds per model call in the normal mode


def _three_turns(latency: float) -> Callable[[Request], Reply]:
    def answer(request: Request) -> Reply:
        if request.turn < TURNS - 1:
            return tool_reply("Bash", {"command": "echo hi"}, usage=USAGE, delay=latency)
        return text_reply("done", usage=USAGE, delay=latency)

    return answer


@dataclass
class Run:
    wall: float
    usage: Usage
    batches: int  # Message Batches sent (0 in the normal mode)
    children: int  # children alive when the memory was read
    pss_mb: float  # their proportional set size, summed
    private_mb: float  # of it, the pages that are each child's own


def _memory(pid: int) -> tuple[int, float, float]:
    """The descendants of ``pid``, and their Pss and private memory summed, in MB."""
    pss = private = 0
    found = descendants(pid)
    for child in found:
        try:
            with open(f"/proc/{child}/smaps_rollup") as rollup:
                for line in rollup:
                    name, _, rest = line.partition(":")
                    if name == "Pss":
                        pss += int(rest.split()[0])
                    elif name in ("Private_Clean", "Private_Dirty"):
                        private += int(rest.split()[0])
        except (OSError, ValueError):
            continue
    return len(found), pss / 1024, private / 1024


def _run(tasks: int, delay: float, window: float, api_batches: bool) -> Run:
    latency = 0.0 if api_batches else LATENCY
    with (
        tempfile.TemporaryDirectory(prefix="isoagent-bench-") as tmp,
        MessagesServer(_three_turns(latency)) as server,
    ):
        server.batch_delay = delay
        work = Path(tmp)
        lines = [{"id": f"t{i}", "prompt": f"batch task {i}"} for i in range(tasks)]
        (work / "tasks.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        argv = [str(SCRIPT), "batch", "tasks.jsonl", "-j", str(tasks), "-o", "out.jsonl"]
        argv += ["--model", MODEL, "--timeout", "600"]
        if api_batches:
            argv += ["--api-batches", "--batch-window", f"{window:g}"]
        started = time.perf_counter()
        process = subprocess.Popen(
            argv, cwd=work, env=cli_env(server), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        memory = (0, 0.0, 0.0)
        while process.poll() is None:
            # while the second round's batch is in flight, every child waits on it
            if api_batches and len(server.batches) == 2 and not memory[0]:
                time.sleep(min(delay / 2, 1.0))
                memory = _memory(process.pid)
            time.sleep(0.05)
        wall = time.perf_counter() - started
        _, stderr = process.communicate()
        records = [json.loads(line) for line in (work / "out.jsonl").read_text().splitlines()]
        if process.returncode != 0 or any(r["status"] != "ok" for r in records):
            raise RuntimeError(f"isoagent batch exited {process.returncode}: {stderr[-2000:]}")
        usage = sum((Usage(**r["tokens"]) for r in records), Usage())
        return Run(wall, usage, len(server.batches), *memory)


def row(tasks: int, delay: float, window: float) -> list[Line]:
    normal = _run(tasks, delay, window, api_batches=False)
    batched = _run(tasks, delay, window, api_batches=True)
    cost = cost_usd(MODEL, batched.usage, BATCH_PRICE)
    normal_cost = cost_usd(MODEL, normal.usage)
    most_batches = TURNS + 2
    most_wall = TURNS * (delay + window) * 1.2
    ratio = cost / normal_cost
    met = (
        abs(ratio - 0.5) <= 0.01
        and batched.usage == normal.usage
        and batched.batches <= most_batches
        and batched.wall <= most_wall
    )
    per_child = batched.private_mb / max(batched.children, 1)
    return [
        Line(
            "api batches",
            f"`isoagent batch --api-batches`, {tasks} tasks x {TURNS} turns, `-j {tasks}`, "
            f"Message Batches ending {delay:g} s after they are sent, `--batch-window "
            f"{window:g}`: whole command",
            Stat([batched.wall], "s"),
            f"{batched.batches} Message Batches; cost {ratio:.3f}x the normal mode's "
            f"(${cost:.2f} against ${normal_cost:.2f})",
            f"≤ {most_batches} batches, ≤ {most_wall:.0f} s, cost 0.5x ±2%",
            met,
            notes=[
                f"Tokens: {batched.usage.input_tokens:,} in and {batched.usage.output_tokens:,} "
                f"out in both modes; each mode's tokens at its price ({MODEL}; the batch's at "
                f"{BATCH_PRICE}). While the second Message Batch was in flight, "
                f"{batched.children} processes below the CLI (the children, their fork "
                f"server) had {batched.pss_mb:.0f} MB of Pss, {batched.private_mb:.0f} MB of "
                f"it private: {per_child:.1f} MB of its own per waiting child."
            ],
        ),
        reference(
            "api batches",
            f"the same batch through /v1/messages ({LATENCY * 1000:.0f} ms per model call)",
            Stat([normal.wall], "s"),
        ),
    ]
