"""Claude Code's hooks, run by the parent: the claude-agent-sdk's callbacks (``hooks=`` of
``ClaudeSDKClient``) and a settings file's command hooks, for the parent's and the
children's tool calls and for a child's start and end."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import claude_agent_sdk
import pytest
from claude_agent_sdk import ClaudeAgentOptions, HookMatcher, ResultMessage, UserMessage

from isoagent.parent.agent.hooks import Hooks, SessionHooks
from isoagent.parent.children.child_hooks import HookLedger, Subagent
from isoagent.protocol import HookCall, HookPlan, HookReply, ModelCall, ModelReply, TextBlock
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.faulty_children import HARMLESS
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.test_mcp_servers import sdk_calc
from tests.test_print_mode import CLAUDE, ISOAGENT_SCRIPT, needs_claude

REPO = Path(__file__).resolve().parent.parent


def _env(server: MessagesServer, tmp_path: Path) -> dict[str, str]:
    return cli_env(server, HOME=str(tmp_path / "home"))


def talk(
    prompt: str, workspace: Path, env: dict[str, str], cli: Path = ISOAGENT_SCRIPT, **options: Any
) -> list[Any]:
    """One message through ``ClaudeSDKClient`` to the CLI at ``cli``: what came back."""
    opts = ClaudeAgentOptions(cli_path=str(cli), cwd=str(workspace), env=env, **options)

    async def run() -> list[Any]:
        async with claude_agent_sdk.ClaudeSDKClient(opts) as client:
            await client.query(prompt)
            return [m async for m in client.receive_response()]

    return asyncio.run(asyncio.wait_for(run(), 120))


CHILD_PROMPT = "run the command"


def _is_child(req: Request) -> bool:
    return CHILD_PROMPT in req.first_user_text


def delegates_a_command(command: str, agent: str = "general-purpose") -> Any:
    """The parent delegates once to ``agent`` (in the foreground); the child runs
    ``command`` in Bash and answers with what its tool result said. Works for isoagent and
    Claude Code alike (whose subagents may delegate too: told apart by prompt)."""

    def handler(req: Request) -> Reply:
        names = req.tool_names
        if not names:  # Claude Code's side requests (a title, ...)
            return text_reply("ok")
        if _is_child(req):
            if req.turn == 0:
                return tool_reply("Bash", {"command": command, "description": "run"})
            result = req.tool_results[0] if req.tool_results else {}
            content = result.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            return text_reply(f"child saw (error={result.get('is_error', False)}): {text}")
        if req.turn == 0:
            task = {"description": "run it", "prompt": CHILD_PROMPT,
                    "subagent_type": agent}  # fmt: skip
            # Claude Code's runs in the background unless told
            return tool_reply("Agent", {**task, "run_in_background": False})
        return text_reply("parent done")

    return handler


def child_requests(server: MessagesServer) -> list[Request]:
    return [r for r in server.requests if r.tool_names and _is_child(r)]


def claude_env(server: MessagesServer, home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": server.base_url,
        "ANTHROPIC_API_KEY": "test-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


CLIS = [
    pytest.param("isoagent", id="isoagent"),
    pytest.param("claude", id="claude-code", marks=needs_claude),
]


@pytest.mark.parametrize("cli", CLIS)
def test_a_pre_tool_use_hook_that_denies_a_childs_bash_stops_it(
    cli: str, api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """The command does not run (the file it would touch is not there), the child's model
    reads the hook's reason as the call's error result, and the hook's input is Claude
    Code's: the tool's name and input, the child's agent id and type."""
    api_server.handler = delegates_a_command("touch made.txt")
    seen: list[dict[str, Any]] = []

    async def no_bash(data: Any, tool_use_id: str | None, _context: Any) -> dict[str, Any]:
        seen.append({**data, "callback_tool_use_id": tool_use_id})
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "no commands in subagents",
            }
        }

    hooks = {"PreToolUse": [HookMatcher(matcher="Bash", hooks=[no_bash])]}
    if cli == "claude":
        env, path = claude_env(api_server, tmp_path / "home"), CLAUDE
        messages = talk("go", workspace, env, path, hooks=hooks, allowed_tools=["Bash", "Agent"])
    else:
        messages = talk("go", workspace, _env(api_server, tmp_path), hooks=hooks)

    assert isinstance(messages[-1], ResultMessage) and not messages[-1].is_error
    assert not (workspace / "made.txt").exists()
    (hook,) = seen
    assert hook["hook_event_name"] == "PreToolUse"
    assert hook["tool_name"] == "Bash"
    assert hook["tool_input"]["command"] == "touch made.txt"
    assert hook["agent_type"] == "general-purpose" and hook["agent_id"]
    assert hook["tool_use_id"] == hook["callback_tool_use_id"]
    assert hook["cwd"] == str(workspace) and hook["session_id"]
    answer = child_requests(api_server)[-1].tool_results[0]
    assert answer["is_error"] is True
    assert "no commands in subagents" in json.dumps(answer["content"])


def test_a_pre_tool_use_hook_changes_the_parents_bash_input(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """updatedInput with allow: the parent's bash runs the hook's command, not the model's."""

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply("Bash", {"command": "echo from-the-model > out.txt"})
        return text_reply("done")

    api_server.handler = handler

    async def rewrite(data: Any, _id: str | None, _context: Any) -> dict[str, Any]:
        assert "agent_id" not in data  # the parent's own call
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "allow",
                "updatedInput": {"command": "echo from-the-hook > out.txt"},
            }
        }

    hooks = {"PreToolUse": [HookMatcher(matcher="Bash", hooks=[rewrite])]}
    messages = talk("go", workspace, _env(api_server, tmp_path), hooks=hooks)
    assert isinstance(messages[-1], ResultMessage) and not messages[-1].is_error
    assert (workspace / "out.txt").read_text() == "from-the-hook\n"


def test_continue_false_ends_the_agent_before_its_call_runs(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """``continue: false`` (the SDK's ``continue_``) from a PreToolUse hook: the call does
    not run (where Claude Code runs it: the hook did not deny it, but said stop), its
    result is the hook's stopReason, and the parent's turn ends there as Claude Code's
    does, a success stopped by a hook."""

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply("Bash", {"command": "touch made.txt"})
        return text_reply("went on")

    api_server.handler = handler

    async def stop(*_: Any) -> dict[str, Any]:
        return {"continue_": False, "stopReason": "enough for today"}

    hooks = {"PreToolUse": [HookMatcher(matcher="Bash", hooks=[stop])]}
    messages = talk("go", workspace, _env(api_server, tmp_path), hooks=hooks)
    result = messages[-1]
    assert isinstance(result, ResultMessage) and not result.is_error
    assert result.terminal_reason == "hook_stopped"
    [refused] = [b for m in messages if isinstance(m, UserMessage) for b in m.content]
    assert refused.is_error and "stopped by a PreToolUse hook: enough for today" in str(
        refused.content
    )
    assert not (workspace / "made.txt").exists()
    assert len(api_server.requests) == 1


def test_the_parents_prompt_tool_results_and_end_go_through_their_hooks(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """UserPromptSubmit adds to the prompt, PostToolUse to a tool's result; Stop, blocking
    once, makes the parent go on with its reason."""

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply("Bash", {"command": "echo ran"})
        return text_reply(f"turn {req.turn}")

    api_server.handler = handler
    stops: list[bool] = []

    async def context(data: Any, *_: Any) -> dict[str, Any]:
        event = data["hook_event_name"]
        return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": event + "!"}}

    async def stop(data: Any, *_: Any) -> dict[str, Any]:
        stops.append(data["stop_hook_active"])
        return {} if data["stop_hook_active"] else {"decision": "block", "reason": "not yet"}

    hooks = {
        "UserPromptSubmit": [HookMatcher(hooks=[context])],
        "PostToolUse": [HookMatcher(matcher="Bash", hooks=[context])],
        "Stop": [HookMatcher(hooks=[stop])],
    }
    messages = talk("go", workspace, _env(api_server, tmp_path), hooks=hooks)
    assert isinstance(messages[-1], ResultMessage) and messages[-1].result == "turn 2"
    first, second, third = api_server.requests
    assert first.first_user_text == "go\n\nUserPromptSubmit!"
    assert second.tool_results[0]["content"] == "ran\n\n\nPostToolUse!"
    assert third.messages[-1]["content"][0]["text"] == "Stop hook feedback:\nnot yet"
    assert stops == [False, True]


def test_subagent_start_and_stop_fire_with_the_agent_type(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """SubagentStart adds its context to the child's prompt; SubagentStop sees the child's
    last words and, blocking once, makes the child go on with its reason."""
    api_server.handler = delegates_a_command("echo hi")
    events: list[dict[str, Any]] = []

    async def start(data: Any, _id: str | None, _context: Any) -> dict[str, Any]:
        events.append(data)
        return {"hookSpecificOutput": {"hookEventName": "SubagentStart",
                                       "additionalContext": "START-CONTEXT"}}  # fmt: skip

    async def stop(data: Any, _id: str | None, _context: Any) -> dict[str, Any]:
        events.append(data)
        return {} if data["stop_hook_active"] else {"decision": "block", "reason": "once more"}

    hooks = {
        "SubagentStart": [HookMatcher(matcher="general-purpose", hooks=[start])],
        "SubagentStop": [HookMatcher(hooks=[stop])],
    }
    messages = talk("go", workspace, _env(api_server, tmp_path), hooks=hooks)
    assert isinstance(messages[-1], ResultMessage) and not messages[-1].is_error

    started, stopped, again = events
    assert started["hook_event_name"] == "SubagentStart"
    assert (started["agent_type"], started["agent_id"]) == ("general-purpose", "001")
    assert stopped["hook_event_name"] == "SubagentStop"
    assert (stopped["agent_type"], stopped["agent_id"]) == ("general-purpose", "001")
    assert stopped["stop_hook_active"] is False and again["stop_hook_active"] is True
    assert stopped["last_assistant_message"].startswith("child saw (error=False): hi")
    assert Path(stopped["agent_transcript_path"]).is_file()
    first, *_, last = child_requests(api_server)
    assert "START-CONTEXT" in first.first_user_text
    assert last.messages[-1]["content"][0]["text"] == "Stop hook feedback:\nonce more"


@pytest.mark.parametrize("cli", CLIS)
def test_a_settings_command_hook_blocks_a_childs_bash_with_exit_2(
    cli: str, api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """``--settings`` hooks, Claude Code's format: the command gets the input as JSON on
    stdin and exits 2; the call does not run and its stderr is what the child's model reads."""
    api_server.handler = delegates_a_command("touch made.txt")
    record = tmp_path / "hook-input.json"
    command = f"cat > {record}; echo 'no commands here' >&2; exit 2"
    hook = {"matcher": "Bash|Write", "hooks": [{"type": "command", "command": command}]}
    args = ["-p", "go", "--settings", json.dumps({"hooks": {"PreToolUse": [hook]}})]
    if cli == "claude":
        env = claude_env(api_server, tmp_path / "home")
        args += ["--allowedTools", "Bash,Agent"]
        done = subprocess.run(
            [str(CLAUDE), *args], env=env, cwd=workspace, capture_output=True, text=True,
            input="", timeout=120,
        )  # fmt: skip
    else:
        done = run_cli(args, _env(api_server, tmp_path), cwd=workspace, input="")
    assert done.returncode == 0, done.stderr
    assert not (workspace / "made.txt").exists()
    given = json.loads(record.read_text())
    assert (given["tool_name"], given["tool_input"]["command"]) == ("Bash", "touch made.txt")
    assert given["agent_type"] == "general-purpose"
    answer = child_requests(api_server)[-1].tool_results[0]
    assert answer["is_error"] is True and "no commands here" in answer["content"]


def test_a_settings_command_hooks_json_reaches_a_childs_tool_result(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """A command hook's JSON on stdout decides: PostToolUse's additionalContext follows the
    child's bash output in what its model reads; the hook got the output as tool_response."""
    api_server.handler = delegates_a_command("echo out")
    record = tmp_path / "hook-input.json"
    said = {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "seen"}}
    command = f"cat > {record}; echo '{json.dumps(said)}'"
    hook = {"matcher": "Bash", "hooks": [{"type": "command", "command": command}]}
    args = ["-p", "go", "--settings", json.dumps({"hooks": {"PostToolUse": [hook]}})]
    done = run_cli(args, _env(api_server, tmp_path), cwd=workspace, input="")
    assert done.returncode == 0, done.stderr
    given = json.loads(record.read_text())
    assert (given["hook_event_name"], given["tool_response"]) == ("PostToolUse", "out\n")
    answer = child_requests(api_server)[-1].tool_results[0]
    assert answer["content"] == "out\n\n\nseen" and not answer.get("is_error")


def test_a_child_cannot_ask_the_hooks_about_what_its_task_does_not(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """A child is untrusted: a HookCall for a tool its Task's plan does not name (hooks
    match Bash only) ends it, and the SDK's callback never hears of it."""
    heard: list[Any] = []

    async def hook(data: Any, *_: Any) -> dict[str, Any]:
        heard.append(data)
        return {}

    forger = f"{sys.executable} -m tests.support.faulty_children forge-hook {tmp_path}"
    env = {**_env(api_server, tmp_path), "ISOAGENT_CHILD_COMMAND": forger, "PYTHONPATH": str(REPO)}
    api_server.handler = delegates_a_command("true")
    hooks = {"PreToolUse": [HookMatcher(matcher="Bash", hooks=[hook])]}
    talk("go", workspace, env, hooks=hooks)
    assert (tmp_path / "forged.pid").exists()
    assert [h["tool_name"] for h in heard] == []
    answer = api_server.requests[-1].tool_results[0]
    assert "asked the hooks about what its Task does not: PreToolUse of Write" in str(
        answer["content"]
    )


@pytest.mark.parametrize(
    ("behaviour", "why"),
    [
        ("skip-hook", r"ran Bash \(toolu_\w+\) without asking the PreToolUse hooks"),
        ("lie-hook", r"told its model something else than a PreToolUse hook's denial of toolu_"),
    ],
    ids=["skips-the-hook", "runs-a-denied-call"],
)
def test_a_child_that_runs_past_a_hook_is_ended_and_says_why(
    behaviour: str, why: str, api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """A subverted child can run a command without asking the hooks, or though they denied
    it: the parent cannot undo that (the file is there), but the child's next model call
    shows it, and the child is ended with the reason."""

    async def deny(*_: Any) -> dict[str, Any]:
        return {"decision": "block", "reason": "no"}

    forger = f"{sys.executable} -m tests.support.faulty_children {behaviour} {tmp_path}"
    env = {**_env(api_server, tmp_path), "ISOAGENT_CHILD_COMMAND": forger, "PYTHONPATH": str(REPO)}
    api_server.handler = delegates_a_command("touch made.txt")
    talk("go", workspace, env, hooks={"PreToolUse": [HookMatcher(matcher="Bash", hooks=[deny])]})
    assert (tmp_path / "forged.pid").exists() and (workspace / "made.txt").exists()
    assert len(child_requests(api_server)) == 1  # the second call never reached the model
    answer = api_server.requests[-1].tool_results[0]
    assert re.search(f"child {why}", str(answer["content"])), answer


def recorder(heard: list[dict[str, Any]]) -> Any:
    """An SDK hook callback that notes what it is asked and lets everything through."""

    async def hook(data: Any, *_: Any) -> dict[str, Any]:
        heard.append(data)
        return {}

    return hook


@pytest.mark.parametrize(
    ("behaviour", "why", "seen"),
    [
        ("swap-hook", r"asked the PreToolUse hooks about (toolu_\w+) with an input other "
         r"than its model gave \(Bash\)", []),
        ("twice-hook", r"asked the PreToolUse hooks about (toolu_\w+) twice", ["PreToolUse"]),
        ("big-post", r"asked the PostToolUse hooks about (toolu_\w+) with an output of 60000 "
         r"characters, past its Task's output cap \(30000\)", ["PreToolUse"]),
        ("forge-hooks", r"asked the PreToolUse hooks about toolu_0, no tool call of its "
         r"model's latest answer", []),
    ],
    ids=["another-input", "twice", "an-output-past-the-cap", "ids-the-model-never-gave"],
)  # fmt: skip
def test_a_child_asks_the_hooks_only_about_its_models_calls_as_the_model_made_them(
    behaviour: str,
    why: str,
    seen: list[str],
    api_server: MessagesServer,
    tmp_path: Path,
    workspace: Path,
) -> None:
    """The hooks see a child's steps as its model asked for them: a HookCall for an id its
    model's latest answer does not hold, with another input than the model gave, asked twice,
    or with an output past the Task's cap ends the child before the user's hooks hear of it;
    what they hear is the parent's copy of the model's call."""
    heard: list[dict[str, Any]] = []
    forger = f"{sys.executable} -m tests.support.faulty_children {behaviour} {tmp_path}"
    env = {**_env(api_server, tmp_path), "ISOAGENT_CHILD_COMMAND": forger, "PYTHONPATH": str(REPO)}
    api_server.handler = delegates_a_command(f"touch made.txt; {HARMLESS}")
    matcher = [HookMatcher(matcher="Bash", hooks=[recorder(heard)])]
    talk("go", workspace, env, hooks={"PreToolUse": matcher, "PostToolUse": matcher})

    answer = str(api_server.requests[-1].tool_results[0]["content"])
    assert re.search(f"child {why}", answer), answer
    assert [h["hook_event_name"] for h in heard] == seen
    model_gave = {"command": f"touch made.txt; {HARMLESS}", "description": "run"}
    assert all(h["tool_input"] == model_gave for h in heard)
    assert len(child_requests(api_server)) == (behaviour != "forge-hooks")


def test_a_child_granted_a_whole_mcp_server_still_asks_the_hooks(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """An MCP server granted whole makes the plan every tool (its tools are not known when
    the Task is made): a child that runs its model's bash without asking is still ended."""
    heard: list[dict[str, Any]] = []
    forger = f"{sys.executable} -m tests.support.faulty_children skip-hook {tmp_path}"
    env = {**_env(api_server, tmp_path), "ISOAGENT_CHILD_COMMAND": forger, "PYTHONPATH": str(REPO)}
    api_server.handler = delegates_a_command("touch made.txt", agent="worker")
    worker = claude_agent_sdk.AgentDefinition(
        description="Works.", prompt="Work.", tools=["Bash", "mcp__calc"]
    )
    hooks = {"PreToolUse": [HookMatcher(matcher="Bash", hooks=[recorder(heard)])]}
    talk(
        "go", workspace, env, hooks=hooks, agents={"worker": worker},
        mcp_servers={"calc": sdk_calc()},
    )  # fmt: skip
    assert (workspace / "made.txt").exists() and heard == []
    answer = str(api_server.requests[-1].tool_results[0]["content"])
    assert re.search(r"child ran Bash \(toolu_\w+\) without asking the PreToolUse hooks", answer)
    assert len(child_requests(api_server)) == 1  # its second call never reached the model


def test_a_stop_hook_hears_the_models_last_words_once_per_answer_that_ended() -> None:
    """A Stop follows an answer without tool calls, once; the hooks hear the words the
    parent relayed and whether a Stop hook made the agent go on, not the child's say."""
    ledger = HookLedger(HookPlan(stop=True), 100)
    ledger.answered(ModelCall(0, "m", 1, "", []), ModelReply(0, [TextBlock("done")]))
    asked, refused = ledger.claim(HookCall(1, "Stop", output="forged words", again=True), "done")
    assert refused == "" and (asked.output, asked.again) == ("done", False)
    ledger.heard(asked, HookReply(1, block=True, reason="go on"))
    _, refused = ledger.claim(HookCall(2, "Stop"), "done")
    assert refused == "asked the Stop hooks without an answer of its model that ended"
    ledger.answered(ModelCall(1, "m", 1, "", []), ModelReply(1, [TextBlock("really done")]))
    asked, refused = ledger.claim(HookCall(3, "Stop"), "really done")
    assert refused == "" and (asked.output, asked.again) == ("really done", True)


def test_hooks_isoagent_cannot_run_are_refused_by_name(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """A hook meant to guard something fails closed: an event isoagent never fires, or a
    settings hook that is not a command, refuses the session before anything runs."""

    async def hook(*_: Any) -> dict[str, Any]:
        return {}

    with pytest.raises(Exception, match=r"'hooks\.PermissionRequest': isoagent runs hooks for"):
        talk("go", workspace, _env(api_server, tmp_path),
             hooks={"PermissionRequest": [HookMatcher(hooks=[hook])]})  # fmt: skip
    settings = {"hooks": {"Stop": [{"hooks": [{"type": "prompt", "prompt": "judge"}]}]}}
    args = ["-p", "go", "--settings", json.dumps(settings)]
    done = run_cli(args, _env(api_server, tmp_path), cwd=workspace, input="")
    assert done.returncode == 1
    assert "a 'prompt' hook: isoagent runs command hooks" in done.stderr
    assert api_server.requests == []


def test_a_child_asks_only_about_the_tools_a_matcher_names(tmp_path: Path) -> None:
    """A child whose tools no hook matches pays no round trip per tool call."""
    true = [{"type": "command", "command": "true"}]
    hooks = Hooks.from_settings(
        {"PreToolUse": [{"matcher": "Bash", "hooks": true}],
         "SubagentStop": [{"matcher": "Explore", "hooks": true}]}
    )  # fmt: skip
    session = SessionHooks(hooks, "s", "t", str(tmp_path), "default")
    assert session.plan(["Read", "Grep"]) == HookPlan()
    assert session.plan(["Bash", "Read"]) == HookPlan(pre_tool=("Bash",))
    explore = Subagent("001", "Explore", "t")
    assert session.plan(["Bash"], explore) == HookPlan(pre_tool=("Bash",), stop=True)

    assert session.plan(["mcp__calc"]) == HookPlan(pre_tool=("*",))  # its tools: not known yet
