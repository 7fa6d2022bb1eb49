"""A run's budgets (``--max-tokens-total``, ``--max-budget-usd``) are caps: each call reserves
its most before it is sent, so calls under way at once never pass what is left, and each
running agent has a fair share, so one that spends in a tight loop cannot leave its siblings
nothing. The server counts what it was asked for as the API does (a request's input tokens
from its size, output tokens at most its ``max_tokens``)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import msgspec

from isoagent.child.agent.builtin_agents import BUILTIN_AGENTS
from isoagent.parent.agent.hooks import Hook, Hooks, Matcher
from isoagent.parent.model.aliases import resolve_model
from isoagent.parent.model.prices import cost_usd
from isoagent.parent.records.events import TaskRecord
from isoagent.parent.session import Session
from isoagent.parent.settings import Settings
from isoagent.protocol import Limits, ModelCall, ModelReply, TextBlock, ToolUseBlock, Usage
from tests.conftest import cli_env
from tests.support.cli import read_jsonl, run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.support.rate_limits import request_tokens

OUTPUT_TOKENS = 40  # what each answer would say, at most its max_tokens


class Metered:
    """Counts what each request costs, as the API would: its input tokens and output."""

    def __init__(self, model: str = "sonnet") -> None:
        self.lock = threading.Lock()
        self.tokens = 0
        self.usd = 0.0
        self.model = resolve_model(model)

    def usage(self, request: Request) -> tuple[int, int]:
        used = (request_tokens(request), min(OUTPUT_TOKENS, int(request.body["max_tokens"])))
        with self.lock:
            self.tokens += sum(used)
            self.usd += cost_usd(self.model, Usage(*used))
        return used


def _looping(metered: Metered, honest_waits_for: threading.Event | None = None):
    """Tasks named "loop" call a tool for ever; the others answer in two turns."""

    def handler(request: Request) -> Reply:
        usage = metered.usage(request)
        if request.first_user_text.startswith("loop"):
            return tool_reply("Bash", {"command": "echo again"}, usage=usage)
        if not request.tool_results:
            if honest_waits_for is not None:  # while the looping sibling spends
                honest_waits_for.wait(10)
            return tool_reply("Bash", {"command": "echo first"}, usage=usage)
        return text_reply("honest answer", usage=usage)

    return handler


def test_calls_under_way_at_once_never_pass_the_token_budget(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """Four tasks that loop, four calls at once: the budget was checked only when a call
    started, so each call under way when it ran out was paid past it (60% over at -j 4).
    Now what they were asked for stays within it, the batch exits 5 and says it resumes."""
    metered = Metered()
    api_server.handler = _looping(metered)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": n, "prompt": f"loop {n}"}) + "\n" for n in range(4)))
    args = ["batch", str(tasks), "-j", "4", "-o", "out.jsonl", "-C", str(workspace)]
    env = cli_env(api_server, HOME=str(tmp_path / "home"))
    done = run_cli([*args, "--max-tokens-total", "20000"], env, cwd=tmp_path)
    assert done.returncode == 5, done.stderr
    assert len(api_server.requests) >= 4
    assert metered.tokens <= 20000
    assert "resumable: run it again with the same -o" in done.stderr
    assert "(--max-tokens-total 20000: " in done.stderr  # the budget spent, not another
    assert "--max-budget-usd" not in done.stderr


def test_a_task_spending_in_a_loop_leaves_its_sibling_its_share(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """Played by a task that calls a tool in a tight loop while its sibling's first answer
    is slow: first come, first served, the loop used the whole budget and the honest task's
    second turn was refused. With a fair share each, the loop ends at its half and the
    honest task ends ok."""
    metered = Metered()
    spent_enough = threading.Event()
    handler = _looping(metered, spent_enough)

    def watching(request: Request) -> Reply:
        if sum(r.first_user_text == "loop" for r in api_server.requests) >= 12:
            spent_enough.set()  # first come, first served had drained it by now
        return handler(request)

    api_server.handler = watching
    tasks = tmp_path / "tasks.jsonl"
    lines = [{"id": "loop", "prompt": "loop"}, {"id": "honest", "prompt": "honest"}]
    tasks.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["batch", str(tasks), "-j", "2", "-o", "out.jsonl", "-C", str(workspace)]
    env = cli_env(api_server, HOME=str(tmp_path / "home"))
    done = run_cli([*args, "--max-tokens-total", "16000"], env, cwd=tmp_path)
    records = {r["id"]: r for r in read_jsonl(tmp_path / "out.jsonl")}
    assert "honest" in records, done.stderr  # once in ~3 full runs under load it was not
    assert records["honest"]["status"] == "ok", done.stderr
    assert records["honest"]["summary"] == "honest answer"
    assert "loop" not in records or records["loop"]["status"] == "budget"
    assert metered.tokens <= 16000


class _LoopAndHonest:
    """In-process: task "loop" calls Bash for ever; task "honest" answers in two turns.
    Each answer costs 1,000 tokens of input and 40 of output."""

    async def complete(self, call: ModelCall) -> ModelReply:
        first = call.messages[0].content[0]
        prompt = first.text if isinstance(first, TextBlock) else ""
        usage = Usage(1000, 40)
        if prompt == "honest" and len(call.messages) > 1:
            return ModelReply(call.turn, [TextBlock("honest answer")], "end_turn", usage)
        command = ToolUseBlock(f"t{call.turn}", "Bash", {"command": "echo again"})
        return ModelReply(call.turn, [command], "tool_use", usage)

    async def aclose(self) -> None:
        pass


def test_a_sibling_still_starting_keeps_its_share_of_the_budget(workspace: Path) -> None:
    """The honest task's start is held (its SubagentStart hook waits) until the looping
    task has ended. The budget's sharers were the children whose process had started: the
    loop, alone, spent all of it, and the honest task, started at last, was refused (as under
    load a slow start was: 1 full run in 4). A child in its slot shares from the start."""
    from isoagent.parent.batch.input import BatchTask
    from isoagent.parent.batch.runner import BatchRun

    session: Session | None = None

    def hold(request: dict[str, Any], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + 30  # the loop ends within a second
        while time.monotonic() < deadline and not (session and session.supervisor.finished):
            time.sleep(0.01)
        return {"subtype": "success", "response": {}}

    held = Hooks({"SubagentStart": (Matcher("honest", (Hook(callback="hold"),)),)}, hold)
    agent = BUILTIN_AGENTS["general-purpose"]
    honest = msgspec.structs.replace(agent, name="honest")
    settings = Settings(
        workdir=workspace, model="m", limits=Limits(), agents=dict(BUILTIN_AGENTS),
        max_parallel=2, max_tokens_total=16000, hooks=held,
    )  # fmt: skip
    tasks = [BatchTask("loop", 1, "loop", agent), BatchTask("honest", 2, "honest", honest)]
    written: list[TaskRecord] = []

    async def run() -> None:
        nonlocal session
        async with Session.open(settings, source=_LoopAndHonest()) as session:
            runner = BatchRun(tasks, [], set(), None, written.append, say=lambda line: None)
            await runner.run(session)
        assert session.token_budget is not None
        assert session.token_budget.spent <= 16000

    asyncio.run(run())
    assert [(r.id, r.status, r.summary) for r in written] == [("honest", "ok", "honest answer")]


def test_a_cost_budget_is_a_cap_kept_with_the_output_for_the_resume(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """$0.04 for tasks that loop at -j 4: what the server was asked for stays within it
    (at -j 4 it was 60% over); the same command again spends at most what was left (the
    budget is the batch's, kept with its -o, not each invocation's); a larger one ends it."""
    metered = Metered()
    api_server.handler = _looping(metered)
    tasks = tmp_path / "tasks.jsonl"
    lines = [{"id": n, "prompt": f"loop {n}"} for n in range(3)] + [{"id": 9, "prompt": "x"}]
    tasks.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["batch", str(tasks), "-j", "4", "-o", "out.jsonl", "-C", str(workspace)]
    args += ["--model", "sonnet", "--max-budget-usd"]
    env = cli_env(api_server, HOME=str(tmp_path / "home"))
    done = run_cli([*args, "0.04"], env, cwd=tmp_path)
    assert done.returncode == 5, done.stderr
    assert "is spent" in done.stderr and "resumable" in done.stderr
    assert 0 < metered.usd <= 0.04

    again = run_cli([*args, "0.04"], env, cwd=tmp_path)
    assert again.returncode == 5, again.stderr
    assert metered.usd <= 0.04  # both runs: the budget was spent once, not once a run

    api_server.handler = lambda request: text_reply("done", usage=metered.usage(request))
    last = run_cli([*args, "1"], env, cwd=tmp_path)
    assert last.returncode == 0, last.stderr
    assert sorted(r["id"] for r in read_jsonl(tmp_path / "out.jsonl") if r["status"] == "ok") == [
        0,
        1,
        2,
        9,
    ]


def test_run_and_task_take_a_cost_budget(api_server: MessagesServer, tmp_path: Path) -> None:
    metered = Metered()
    api_server.handler = _looping(metered)
    env = cli_env(api_server, HOME=str(tmp_path / "home"))
    for command in (["task", "loop"], ["run", "loop"]):
        done = run_cli(
            [*command, "--model", "sonnet", "--max-budget-usd", "0.02"], env, cwd=tmp_path
        )
        assert done.returncode == 5, done.stderr
    assert 0 < metered.usd <= 0.04
