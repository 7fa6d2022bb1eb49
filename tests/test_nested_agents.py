"""Nested subagents (``--max-depth 2``): a general-purpose child has ``task`` too; its call is
a request to the parent (a ``TaskCall`` frame), which checks depth and limits and starts the
child's child as a sandboxed process of its own, with its own transcript; only its summary
goes up. By default (and at the deepest level) a child has no ``task``, and a forged request
ends it. Real child processes against the test Messages server."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from isoagent.parent.children import supervisor
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply

LEVEL_1 = "LEVEL 1: find the answer, with help"
LEVEL_2 = "LEVEL 2: read the secret"
SECRET = "SECRET-DETAIL-8d1f"  # what the grandchild reads; only its summary goes up


def nesting(level_1_calls: str = "Explore") -> Any:
    """The parent delegates LEVEL_1 to general-purpose, whose child delegates LEVEL_2 to
    ``level_1_calls``; the grandchild reads SECRET with bash and sums it up."""

    def handler(req: Request) -> Reply:
        last = req.tool_results[0]["content"] if req.turn else ""
        if req.first_user_text == LEVEL_2:
            if req.turn == 0:
                return tool_reply("Bash", {"command": f"echo {SECRET}"})
            return text_reply("level 2 summary: the secret is read")
        if req.first_user_text == LEVEL_1:
            if req.turn == 0:
                call = {"description": "d2", "prompt": LEVEL_2, "subagent_type": level_1_calls}
                return tool_reply("Agent", call)
            return text_reply(f"level 1 summary, from below: {str(last)[:60]}")
        if req.turn == 0:
            call = {"description": "d1", "prompt": LEVEL_1, "subagent_type": "general-purpose"}
            return tool_reply("Agent", call)
        return text_reply(f"parent heard: {last}")

    return handler


def run_print(
    server: MessagesServer, tmp_path: Path, workspace: Path, *args: str
) -> list[dict[str, Any]]:
    env = cli_env(server, HOME=str(tmp_path / "home"))
    argv = ["-p", "go", "--output-format", "stream-json", "--verbose", *args]
    done = run_cli(argv, env, cwd=workspace, input="")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def requests_for(server: MessagesServer, prompt: str) -> list[Request]:
    return [r for r in server.requests if r.first_user_text == prompt]


def test_with_max_depth_2_a_child_delegates_to_a_grandchild_process_and_gets_its_summary(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = nesting()
    # one slot: the grandchild runs in its parent's, which waits for it (no deadlock)
    args = ["--max-depth", "2", "--max-parallel", "1", "--timeout", "60"]
    lines = run_print(api_server, tmp_path, workspace, *args)

    level_1, level_2 = requests_for(api_server, LEVEL_1), requests_for(api_server, LEVEL_2)
    assert "Agent" in level_1[0].tool_names  # general-purpose delegates at depth 1 of 2
    assert "Agent" not in level_2[0].tool_names  # the deepest level does not
    below = str(level_1[-1].tool_results[0]["content"])
    assert below.startswith("level 2 summary: the secret is read")  # its summary alone
    assert SECRET not in below and SECRET in level_2[-1].text()
    assert all(SECRET not in r.text() for r in requests_for(api_server, "go"))
    started = [m for m in lines if m.get("subtype") == "task_started"]
    assert [(m["task_id"], m["subagent_type"]) for m in started] == [
        ("001", "general-purpose"),
        ("002", "Explore"),
    ]
    (asked,) = [
        b["id"] for m in lines if m["type"] == "assistant" and m.get("child") == "001"
        for b in m["message"]["content"] if b["type"] == "tool_use"
    ]  # fmt: skip
    assert started[1]["tool_use_id"] == asked  # the grandchild answers its parent's call
    pids = {m["pid"] for m in started}
    assert len(pids) == 2 and os.getpid() not in pids  # two processes, neither this one
    transcripts = {m["task_id"]: workspace / m["transcript"] for m in started}
    assert SECRET in transcripts["002"].read_text()  # its own transcript holds what it read
    assert SECRET not in transcripts["001"].read_text()
    assert lines[-1]["result"].startswith("parent heard: level 1 summary, from below: level 2")


@pytest.mark.parametrize("max_depth", [1, 2])
def test_a_child_at_the_deepest_level_has_no_task_and_its_call_of_one_is_refused_by_name(
    max_depth: int, api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """The default (1) is as before: no child delegates; at 2, the grandchild does not."""
    deepest = [LEVEL_1, LEVEL_2][max_depth - 1]
    script = nesting()

    def handler(req: Request) -> Reply:
        if req.first_user_text == deepest:
            if req.turn == 0:
                call = {"description": "d3", "prompt": "LEVEL 3", "subagent_type": "Explore"}
                return tool_reply("Agent", call)
            return text_reply(f"deepest: {req.tool_results[0]['content']}")
        return script(req)

    api_server.handler = handler
    lines = run_print(api_server, tmp_path, workspace, "--max-depth", str(max_depth))
    at_the_bottom = requests_for(api_server, deepest)
    assert "Agent" not in at_the_bottom[0].tool_names
    refused = at_the_bottom[-1].tool_results[0]
    assert refused["is_error"] and "unknown tool 'Agent'" in refused["content"]
    assert requests_for(api_server, "LEVEL 3") == []
    started = [m["task_id"] for m in lines if m.get("subtype") == "task_started"]
    assert started == ["001", "002"][:max_depth]


def test_a_child_asking_for_an_unknown_agent_type_is_told_the_ones_there_are(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = nesting(level_1_calls="Nonesuch")
    run_print(api_server, tmp_path, workspace, "--max-depth", "2")
    refused = requests_for(api_server, LEVEL_1)[-1].tool_results[0]
    assert refused["is_error"] and "unknown subagent_type 'Nonesuch'" in refused["content"]
    assert "general-purpose" in refused["content"] and requests_for(api_server, LEVEL_2) == []


def forge_task(
    server: MessagesServer, tmp_path: Path, workspace: Path, agent: str, *args: str
) -> str:
    """``isoagent task --agent AGENT`` whose child forges a request for a general-purpose
    child (``forge-task``): what it was told. Nothing started but the forger, nothing reached
    the model, and the forger ended with the reason on stderr."""
    forger = f"{sys.executable} -m tests.support.faulty_children forge-task {tmp_path}"
    env = cli_env(server, ISOAGENT_CHILD_COMMAND=forger)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    done = run_cli(["task", "--agent", agent, "--timeout", "30", *args, "go"], env, cwd=workspace)
    told = (tmp_path / "replies").read_text()
    assert done.returncode != 0
    assert told.split("refused by the parent: ", 1)[1].split("'", 1)[0] in done.stderr
    runs = list((workspace / ".isoagent" / "runs").iterdir())
    assert [p.name for p in runs[0].glob("child-*.jsonl")] == [f"child-001-{agent}.jsonl"]
    assert server.requests == []
    return told


def test_a_forged_task_request_from_a_child_at_the_deepest_level_ends_it(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """A child is untrusted: a TaskCall its Task gave it no tool for (depth 1 of 1) starts
    nothing, is answered with the refusal, and ends the child with the reason."""
    told = forge_task(api_server, tmp_path, workspace, "general-purpose")
    assert "its Task grants no delegation (depth 1 of --max-depth 1)" in told


def test_a_read_only_child_cannot_get_a_writing_child_by_asking(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """Explore is read-only and does not delegate: its forged request for a general-purpose
    child (which would write the workspace) is refused by its grant, even with a level left."""
    told = forge_task(api_server, tmp_path, workspace, "Explore", "--max-depth", "2")
    assert "asked for a general-purpose child, but its Task grants no delegation" in told
    assert "(Explore does not delegate)" in told


def test_a_delegating_child_starts_no_type_with_more_than_itself(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """A read-only type that delegates (its tools name Task) may start read-only types only:
    its Task lists them, and a forged request for general-purpose is refused by that grant."""
    agents = workspace / ".claude" / "agents"
    agents.mkdir(parents=True)
    front = "name: lead\ndescription: leads\ntools: Read, Grep, Glob, Bash, Task"
    (agents / "lead.md").write_text(f"---\n{front}\n---\nlead\n")
    args = ["--max-depth", "2"]
    told = forge_task(api_server, tmp_path, workspace, "lead", *args)
    assert "asked for a general-purpose child, but its Task lets it start only " in told
    assert told.split("start only ", 1)[1].startswith("Explore, Plan, lead")


def test_nesting_is_the_agent_types_not_that_of_the_tools_a_session_offers(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """Under --allowedTools (the SDK's default permission mode, nobody to ask) a general-
    purpose child has no write tools, and still delegates, as Claude Code's does."""
    api_server.handler = nesting()
    run_print(api_server, tmp_path, workspace, "--max-depth", "2", "--allowedTools", "Bash")

    level_1 = requests_for(api_server, LEVEL_1)
    assert "Write" not in level_1[0].tool_names and "Agent" in level_1[0].tool_names
    assert requests_for(api_server, LEVEL_2), "the grandchild ran"


def test_a_childs_request_past_the_runs_token_budget_starts_nothing(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """The parent's and the child's first turns spend the budget (15 tokens each): the
    child's task request is refused with why, and no grandchild starts."""
    api_server.handler = nesting()
    env = cli_env(api_server, HOME=str(tmp_path / "home"))
    args = ["-p", "go", "--output-format", "stream-json", "--verbose"]
    done = run_cli([*args, "--max-depth", "2", "--max-tokens-total", "30"], env, cwd=workspace)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    started = [m for m in lines if m.get("subtype") == "task_started"]
    assert [m["task_id"] for m in started] == ["001"]
    transcript = (workspace / started[0]["transcript"]).read_text()
    assert "the run's token budget (30) is used up" in transcript
    assert requests_for(api_server, LEVEL_2) == []


def test_children_may_start_only_so_many_children_in_a_run(
    api_server: MessagesServer,
    tmp_path: Path,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(supervisor, "NESTED_CHILDREN", 1)
    script = nesting()

    def handler(req: Request) -> Reply:
        if req.first_user_text == LEVEL_1 and req.turn == 1:  # once more
            call = {"description": "d2", "prompt": LEVEL_2, "subagent_type": "Explore"}
            return tool_reply("Agent", call)
        if req.first_user_text == LEVEL_1 and req.turn == 2:
            return text_reply(f"second: {req.tool_results[0]['content']}")
        return script(req)

    api_server.handler = handler
    lines = run_print(api_server, tmp_path, workspace, "--max-depth", "2")
    refused = requests_for(api_server, LEVEL_1)[-1].tool_results[0]
    assert refused["is_error"]
    assert refused["content"] == "this run's children have started 1 children, its limit"
    started = [m["task_id"] for m in lines if m.get("subtype") == "task_started"]
    assert started == ["001", "002"]
