"""``isoagent -p``: ``claude -p`` as a drop-in, its flags, and the claude-agent-sdk's own
``query()`` driving isoagent through ``cli_path``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import claude_agent_sdk
import pytest
from claude_agent_sdk import AssistantMessage, ClaudeAgentOptions, ResultMessage, SystemMessage

from isoagent.parent.model.aliases import CURRENT_MODELS
from tests.conftest import cli_env, shared_gateway
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply

ISOAGENT_SCRIPT = Path(sys.executable).with_name("isoagent")
CLAUDE = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"

# each command runs in-process, then through the warm daemon: the same output and exit codes
pytestmark = pytest.mark.usefixtures("both_paths")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def env_for(server: MessagesServer, tmp_path: Path, **extra: str) -> dict[str, str]:
    return cli_env(server, HOME=str(tmp_path / "home"), **extra)


def echo(req: Request) -> Reply:
    """Answers with the prompt it got and the tools it was offered."""
    return text_reply(f"{req.first_user_text} | {','.join(req.tool_names)}")


def test_print_flag_runs_the_parent_and_prints_the_answer(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = echo
    done = run_cli(["-p", "hello"], env_for(api_server, tmp_path), cwd=workspace, input="")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello | Bash,Read,Write,Edit,Glob,Grep,Agent,SendMessage\n"
    assert done.stderr == ""  # like claude -p: no progress lines


def test_a_print_mode_process_exits_with_nothing_on_stderr(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """As a process: the SDK's connections are closed before the interpreter ends, which
    otherwise reports each unclosed aiohttp session on stderr."""
    api_server.handler = echo
    env = env_for(api_server, tmp_path)
    done = run_cli(["-p", "hello"], env, cwd=workspace, input="", process=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_piped_stdin_is_attached_to_the_prompt(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = lambda req: text_reply(req.first_user_text)
    env = env_for(api_server, tmp_path)
    done = run_cli(["--print", "summarize"], env, cwd=workspace, input="line one\n")
    assert done.stdout == "summarize\nline one\n"
    done = run_cli(["-p"], env, cwd=workspace, input="the whole prompt")
    assert done.stdout == "the whole prompt\n"
    done = run_cli(["run", "summarize"], env, cwd=workspace, input="line one\n")
    assert done.stdout == "summarize\n\n<stdin>\nline one\n</stdin>\n"


def test_model_aliases_and_anthropic_model_as_in_claude_code(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    env = env_for(api_server, tmp_path, ANTHROPIC_MODEL="opus")
    run_cli(["-p", "a"], env, cwd=workspace, input="")
    run_cli(["-p", "b", "--model", "Haiku"], env, cwd=workspace, input="")
    env["ANTHROPIC_DEFAULT_SONNET_MODEL"] = "my-sonnet"
    run_cli(["run", "c", "--model", "sonnet"], env, cwd=workspace, input="")
    assert [r.model for r in api_server.requests] == [
        CURRENT_MODELS["opus"],
        CURRENT_MODELS["haiku"],
        "my-sonnet",
    ]


def test_system_prompt_flags(api_server: MessagesServer, tmp_path: Path, workspace: Path) -> None:
    env = env_for(api_server, tmp_path)
    run_cli(["-p", "a", "--system-prompt", "Be brief."], env, cwd=workspace, input="")
    run_cli(["-p", "b", "--append-system-prompt", "Use French."], env, cwd=workspace, input="")
    run_cli(["-p", "c", "--system-prompt", ""], env, cwd=workspace, input="")
    replaced, appended, default = (r.system for r in api_server.requests)
    assert replaced == "Be brief."
    assert appended.startswith("You are isoagent") and appended.endswith("\n\nUse French.")
    assert default.startswith("You are isoagent")


def test_allowed_and_disallowed_tools_shape_the_parent(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """``--allowedTools 'Bash(git:*)'``: the parent reads, and its Bash runs git only; a

    command that is not git is refused and the model reads why."""

    def handler(req: Request) -> Reply:
        if req.turn == 0 and "Bash" in req.tool_names:
            return tool_reply("Bash", {"command": "git --version; touch made.txt"})
        return echo(req)

    api_server.handler = handler
    env = env_for(api_server, tmp_path)
    args = ["-p", "go", "--allowedTools", "Bash(git:*)", "--output-format", "json"]
    done = run_cli(args, env, cwd=workspace, input="")
    assert done.returncode == 0, done.stderr
    assert api_server.requests[0].tool_names == [
        "Read",
        "Glob",
        "Grep",
        "Bash",
        "Agent",
        "SendMessage",
    ]
    refused = api_server.requests[1].tool_results[0]
    assert refused["is_error"] and "`touch made.txt` is not allowed" in refused["content"]
    assert not (workspace / "made.txt").exists()
    [denial] = json.loads(done.stdout)["permission_denials"]  # as Claude Code reports it
    assert denial["tool_name"] == "Bash" and denial["tool_use_id"] == refused["tool_use_id"]
    assert denial["tool_input"] == {"command": "git --version; touch made.txt"}

    done = run_cli(
        ["-p", "go", "--disallowedTools", "Bash,Write", "--disallowedTools", "Task"],
        env, cwd=workspace, input="",
    )  # fmt: skip
    assert done.stdout == "go | Read,Edit,Glob,Grep\n"
    done = run_cli(
        ["-p", "go", "--disallowedTools", "Bash", "--output-format", "stream-json", "--verbose"],
        env, cwd=workspace, input="",
    )  # fmt: skip
    init = json.loads(done.stdout.splitlines()[0])
    assert init["tools"] == [
        "Read",
        "Write",
        "Edit",
        "Glob",
        "Grep",
        "Agent",
        "SendMessage",
    ]


def test_an_unknown_disallowed_tool_is_refused_not_ignored(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    done = run_cli(
        ["-p", "go", "--disallowedTools", "Bsh"], env_for(api_server, tmp_path), cwd=workspace
    )
    assert done.returncode == 2
    assert done.stderr.startswith("isoagent: --disallowedTools: disallowedTools names 'Bsh'")
    assert api_server.requests == []


def test_plan_mode_takes_every_write_away(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = echo
    args = ["-p", "go", "--permission-mode", "plan", "--output-format", "json"]
    done = run_cli(args, env_for(api_server, tmp_path), cwd=workspace, input="")
    assert json.loads(done.stdout)["result"] == "go | Read,Glob,Grep,Agent,SendMessage"
    agents = run_cli(["agents", "--json"], env_for(api_server, tmp_path), cwd=workspace)
    assert "Write" in agents.stdout  # plan mode belongs to the run, not to the files


def test_inline_agents_are_offered_to_the_parent(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    def handler(req: Request) -> Reply:
        if req.is_parent:
            if req.turn == 0:
                task = {"description": "r", "prompt": "review", "subagent_type": "rev"}
                return tool_reply("Agent", task)
            return text_reply(req.tool_results[0]["content"].splitlines()[0])
        return text_reply(f"{req.system} {req.model} {','.join(req.tool_names)}")

    api_server.handler = handler
    agents = {
        "rev": {"description": "d", "prompt": "REV-PROMPT", "tools": ["Read"], "model": "haiku"}
    }
    done = run_cli(
        ["-p", "go", "--agents", json.dumps(agents)],
        env_for(api_server, tmp_path), cwd=workspace, input="",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"REV-PROMPT {CURRENT_MODELS['haiku']} Read\n"


def test_resume_and_continue_carry_the_conversation_on(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = lambda req: text_reply(f"seen {len(req.messages)} messages")
    env = env_for(api_server, tmp_path)
    first = run_cli(["-p", "one", "--output-format", "json"], env, cwd=workspace, input="")
    session = json.loads(first.stdout)["session_id"]
    run_cli(["-p", "two"], env, cwd=workspace, input="")
    resumed = run_cli(["-p", "three", "--resume", session], env, cwd=workspace, input="")
    assert resumed.stdout == "seen 3 messages\n"
    assert [m["role"] for m in api_server.requests[-1].messages] == ["user", "assistant", "user"]
    assert api_server.requests[-1].messages[0]["content"][0]["text"] == "one"
    continued = run_cli(["-p", "four", "-c"], env, cwd=workspace, input="")
    assert continued.stdout == "seen 5 messages\n"  # one, its answer, three, its answer, four

    missing = run_cli(["-p", "x", "--resume", "nope"], env, cwd=workspace, input="")
    assert missing.returncode == 2 and missing.stderr.startswith("isoagent: no run 'nope'")


# -- the claude-agent-sdk's query() against isoagent ----------------------------------


def sdk_query(prompt: str, options: ClaudeAgentOptions) -> list[Any]:
    async def collect() -> list[Any]:
        return [m async for m in claude_agent_sdk.query(prompt=prompt, options=options)]

    return asyncio.run(collect())


def test_the_sdks_query_runs_isoagent_through_cli_path(
    api_server: MessagesServer, tmp_path: Path, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK starts isoagent as it starts Claude Code (no -p, --input-format stream-json,
    an initialize request, the prompt as a user message, stdin closed) and reads it."""
    api_server.handler = echo
    options = ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT),
        cwd=str(workspace),
        model="haiku",
        max_turns=3,
        env={**env_for(api_server, tmp_path), "ISOAGENT_MODEL": ""},
        agents={"rev": claude_agent_sdk.AgentDefinition(description="d", prompt="p")},
    )
    messages = sdk_query("hello from the sdk", options)
    init, answer, result = messages
    assert isinstance(init, SystemMessage) and init.subtype == "init"
    assert init.data["isoagent_version"] and init.data["claude_code_version"]
    assert "rev" in init.data["agents"]  # the agent sent in the initialize request
    assert isinstance(answer, AssistantMessage) and answer.parent_tool_use_id is None
    assert isinstance(result, ResultMessage) and not result.is_error
    assert result.result == "hello from the sdk | Bash,Read,Write,Edit,Glob,Grep,Agent,SendMessage"
    assert api_server.requests[0].model == CURRENT_MODELS["haiku"]
    assert not [r for r in caplog.records if r.levelname == "WARNING"]  # "too old" and such


# -- side by side with Claude Code's own CLI, on the same scripted server ---------------

needs_claude = pytest.mark.skipif(
    not CLAUDE.is_file(), reason="the claude-agent-sdk wheel bundles no claude CLI here"
)


def run_both(
    args: list[str], server: MessagesServer, tmp_path: Path, *, stdin: str = "", ok: bool = True
) -> list[str]:
    """stdout of ``claude ARGS`` and ``isoagent ARGS``, each in an empty workspace; both
    exit 0 (``ok``) or both do not."""
    outputs = []
    for name, command in (("claude", [str(CLAUDE)]), ("isoagent", [str(ISOAGENT_SCRIPT)])):
        workspace = tmp_path / name
        workspace.mkdir(parents=True)
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(workspace),
            "ANTHROPIC_BASE_URL": server.base_url,
            "ANTHROPIC_API_KEY": "test-key",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        if name == "isoagent":  # the worker's gateway, which has the SDK imported
            env = shared_gateway(env)
        done = subprocess.run(
            [*command, *args], env=env, cwd=workspace, capture_output=True, text=True,
            input=stdin, timeout=120,
        )  # fmt: skip
        assert (done.returncode == 0) is ok, f"{name}: {done.stderr}"
        outputs.append(done.stdout)
    return outputs


@needs_claude
def test_json_output_matches_claude_codes_on_the_same_server(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = lambda req: text_reply("THE ANSWER")
    claude, isoagent = (
        json.loads(out)
        for out in run_both(["-p", "q", "--output-format", "json"], api_server, tmp_path)
    )
    for key in ("type", "subtype", "is_error", "result", "num_turns"):
        assert isoagent[key] == claude[key], key
    for key in ("duration_ms", "duration_api_ms", "session_id", "total_cost_usd", "usage"):
        assert type(isoagent[key]) is type(claude[key]), key
    assert set(claude["usage"]) >= set(isoagent["usage"])


@needs_claude
def test_stream_json_has_claude_codes_message_sequence(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = lambda req: text_reply("THE ANSWER")
    args = ["-p", "q", "--output-format", "stream-json", "--verbose", "--model", "haiku"]
    streams = run_both(args, api_server, tmp_path)
    claude, isoagent = (
        [
            (m["type"], m.get("subtype"))
            for m in map(json.loads, out.splitlines())
            if m.get("subtype") != "session_state_changed"
        ]
        for out in streams
    )
    assert claude == isoagent == [("system", "init"), ("assistant", None), ("result", "success")]
    models = {r.model for r in api_server.requests}
    assert models == {CURRENT_MODELS["haiku"]}  # the alias resolved alike by both


def test_the_sdks_client_holds_a_conversation_with_isoagent(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """ClaudeSDKClient keeps stdin open: each query is a user message, and the second
    continues the conversation of the first."""
    api_server.handler = lambda req: text_reply(f"{len(req.messages)} messages")
    options = ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT), cwd=str(workspace), env=env_for(api_server, tmp_path)
    )

    async def talk() -> list[str]:
        answers = []
        async with claude_agent_sdk.ClaudeSDKClient(options) as client:
            for prompt in ("first", "second"):
                await client.query(prompt)
                async for message in client.receive_response():
                    if isinstance(message, ResultMessage):
                        answers.append(message.result or "")
        return answers

    assert asyncio.run(asyncio.wait_for(talk(), 120)) == ["1 messages", "3 messages"]


def test_the_sdks_interrupt_ends_the_parents_turn(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """A model that never stops calling tools, interrupted from the SDK: the turn ends with
    an error result; another control request during a run is refused at once; the client
    can go on talking."""

    def endless(req: Request) -> Reply:
        if any(block.get("text") == "after" for block in req.messages[-1]["content"]):
            return text_reply("still here")  # the session goes on: "go" is still first
        return tool_reply("Bash", {"command": "echo step"}, delay=0.2)

    api_server.handler = endless
    options = ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT), cwd=str(workspace), env=env_for(api_server, tmp_path)
    )

    async def talk() -> tuple[str, list[ResultMessage]]:
        async with claude_agent_sdk.ClaudeSDKClient(options) as client:
            await client.query("go")
            while len(api_server.requests) < 2:  # the run is under way
                await asyncio.sleep(0.05)
            try:
                await client.set_permission_mode("plan")
                refusal = ""
            except Exception as exc:
                refusal = str(exc)
            await client.interrupt()
            results = [m async for m in client.receive_response() if isinstance(m, ResultMessage)]
            await client.query("after")
            results += [m async for m in client.receive_response() if isinstance(m, ResultMessage)]
            return refusal, results

    refusal, (interrupted, after) = asyncio.run(asyncio.wait_for(talk(), 40))  # SDK waits 60 s
    assert "isoagent cannot do this while a run is going" in refusal
    assert interrupted.is_error and interrupted.subtype == "error_during_execution"
    assert (after.is_error, after.result) == (False, "still here")


@needs_claude
def test_piped_stdin_and_max_turns_as_claude_code_does_them(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = lambda req: text_reply("ok")
    run_both(["-p", "summarize"], api_server, tmp_path / "stdin", stdin="piped text")
    user_texts = [
        [b["text"] for b in r.messages[0]["content"] if b.get("type") == "text"]
        if isinstance(r.messages[0]["content"], list)
        else [r.messages[0]["content"]]
        for r in api_server.requests
    ]
    assert all("summarize\npiped text" in texts for texts in user_texts), user_texts

    api_server.handler = lambda req: tool_reply("Bash", {"command": "echo hi", "description": "e"})
    args = ["-p", "loop", "--max-turns", "1", "--output-format", "json"]
    claude, isoagent = (
        json.loads(out) for out in run_both(args, api_server, tmp_path / "turns", ok=False)
    )
    for key in ("subtype", "is_error"):
        assert isoagent[key] == claude[key] == {"subtype": "error_max_turns", "is_error": True}[key]
    assert "maximum number of turns" in claude["errors"][0]
    assert "maximum number of turns" in isoagent["errors"][0]
