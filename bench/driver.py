"""The parent side of the delegation row, run as its own process.

``python -m bench.driver ROUNDS`` (from the repository root, with
``ANTHROPIC_BASE_URL`` pointing at the bench's in-test server) opens a real
``parent/session.py``'s Session -- gateway, SDK source, supervisor, run folder,
transcripts -- and runs one two-turn task ROUNDS times through
``Supervisor.run`` (what the ``Agent`` tool does), each time followed by the same
task as an in-process agent. It prints the phases of each as JSON on stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from isoagent.child.agent.builtin_agents import BUILTIN_AGENTS
from isoagent.child.agent.loop import Agent
from isoagent.child.agent.tools import make_tools
from isoagent.child.agent.tools.base import ToolContext
from isoagent.parent.agent.bridge import GatewayBridge, run_in_thread
from isoagent.parent.children.child_run import ChildRequest
from isoagent.parent.model.conversation import ConversationRecorder
from isoagent.parent.model.sdk import AnthropicSource
from isoagent.parent.records.events import ChildFinished
from isoagent.parent.session import Session
from isoagent.parent.settings import Settings
from isoagent.protocol import Limits, Message, ModelCall, ModelReply, TextBlock

AGENT = BUILTIN_AGENTS["general-purpose"]
WARMUP = "warm-up"  # a prompt the bench's server answers at once


class TimedSource:
    """The SDK source, noting when each model call enters and leaves the gateway."""

    def __init__(self) -> None:
        self.inner = AnthropicSource()
        self.marks: list[tuple[float, float]] = []

    async def complete(self, call: ModelCall) -> ModelReply:
        entered = time.perf_counter()
        reply = await self.inner.complete(call)
        self.marks.append((entered, time.perf_counter()))
        return reply

    async def aclose(self) -> None:
        await self.inner.aclose()


@contextlib.asynccontextmanager
async def _open(workdir: Path) -> AsyncIterator[tuple[Session, TimedSource]]:
    source = TimedSource()
    settings = Settings(
        workdir=workdir,
        model="claude-bench",
        limits=Limits(),
        run_base=workdir / "runs",
        agents=dict(BUILTIN_AGENTS),
    )
    async with Session.open(settings, source=source) as session:
        # The SDK's first call builds its HTTP client and imports lazily; not part of any row.
        call = ModelCall(0, "claude-bench", 64, "", [Message("user", [TextBlock(WARMUP)])])
        await session.gateway.call(call)
        yield session, source


def _check(finished: ChildFinished) -> None:
    if finished.result.status != "ok":
        raise SystemExit(f"bench child {finished.child} failed: {finished.result.error}")


def _phases(started: float, marks: list[tuple[float, float]], ended: float) -> dict[str, float]:
    """Where one two-turn conversation spent its time, in ms."""
    (enter0, leave0), (enter1, leave1) = marks[-2:]
    return {
        "until first model call": (enter0 - started) * 1000,
        "model calls": (leave0 - enter0 + leave1 - enter1) * 1000,
        "tool turn": (enter1 - leave0) * 1000,
        "after last reply": (ended - leave1) * 1000,
    }


async def delegate(workdir: Path, rounds: int) -> dict[str, Any]:
    """One two-turn task, alternately as a child process and as an in-process agent."""
    async with _open(workdir) as (session, source):
        loop = asyncio.get_running_loop()
        out: dict[str, Any] = {"child": [], "in_process": []}
        for i in range(rounds + 1):  # round 0 warms both paths up and is not counted
            prompt = f"delegation round {i}: say hi with bash"
            started = time.perf_counter()
            _check(await session.supervisor.run(ChildRequest("bench", prompt, AGENT)))
            child = _phases(started, source.marks, time.perf_counter())

            ctx = ToolContext(workdir, session.settings.limits)
            agent = Agent(
                GatewayBridge(session.gateway, loop, ConversationRecorder(lambda _: None)),
                make_tools(AGENT.tools, ctx),
                system=AGENT.system_prompt,
                model_name=session.settings.model,
                agent_name=AGENT.name,
            )
            started = time.perf_counter()
            result = await run_in_thread(agent.run, prompt)
            if result.status != "ok":
                raise SystemExit(f"in-process agent failed: {result.error}")
            in_process = _phases(started, source.marks, time.perf_counter())
            if i:
                out["child"].append(child)
                out["in_process"].append(in_process)
        return out


def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="isoagent-bench-") as tmp:
        json.dump(asyncio.run(delegate(Path(tmp), rounds)), sys.stdout)


if __name__ == "__main__":
    main(int(sys.argv[1]))
