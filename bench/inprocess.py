"""The in-process reference: what a user gives up by choosing process isolation.

``python -m bench.inprocess TASKS JOBS`` (with ``ANTHROPIC_BASE_URL`` pointing at the
bench's server) runs TASKS tasks in one process, JOBS at a time, as coroutines sharing one
``AsyncAnthropic`` client. A task makes the model calls an ``isoagent`` child makes (the
general-purpose agent's system prompt and tools, the whole history each turn) and runs each
``Bash`` call the model asks for as an asyncio subprocess, until the model answers.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from typing import Any

import anthropic
import msgspec

from isoagent.child.agent.builtin_agents import BUILTIN_AGENTS
from isoagent.child.agent.tools import make_tools
from isoagent.child.agent.tools.base import ToolContext
from isoagent.parent.children.launch import PACKAGE_ROOT

AGENT = BUILTIN_AGENTS["general-purpose"]
MODEL = "claude-bench"
TOOLS = msgspec.to_builtins(
    [tool.spec for tool in make_tools(AGENT.tools, ToolContext(PACKAGE_ROOT))]
)


async def _bash(command: str) -> str:
    process = await asyncio.create_subprocess_exec(
        "bash", "-c", command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await process.communicate()
    return output.decode(errors="replace") or "(no output)"


async def _task(client: anthropic.AsyncAnthropic, slots: asyncio.Semaphore, prompt: str) -> str:
    async with slots:
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        while True:
            reply = await client.messages.create(
                model=MODEL,
                max_tokens=16384,
                system=AGENT.system_prompt,
                tools=TOOLS,
                messages=messages,
            )
            uses = [block for block in reply.content if block.type == "tool_use"]
            if not uses:
                return "".join(block.text for block in reply.content if block.type == "text")
            messages.append(
                {"role": "assistant", "content": [b.model_dump() for b in reply.content]}
            )
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": use.id,
                    "content": await _bash(use.input["command"]),
                }
                for use in uses
            ]
            messages.append({"role": "user", "content": results})


async def main(tasks: int, jobs: int) -> None:
    """Run the tasks; print the CPU seconds spent before the first one started (start-up,
    the SDK import), so that a caller can tell them from the tasks' own."""
    client = anthropic.AsyncAnthropic(api_key="bench-key")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    setup = usage.ru_utime + usage.ru_stime
    slots = asyncio.Semaphore(jobs)
    answers = await asyncio.gather(*(_task(client, slots, f"batch task {i}") for i in range(tasks)))
    if not all(answers):
        raise SystemExit("bench.inprocess: a task ended without an answer")
    print(json.dumps({"setup_cpu": setup}))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
