"""The claude-agent-sdk's own e2e tests (``e2e-tests/`` of its repository), as equivalents
driven through the real SDK with isoagent as its CLI, and with the bundled Claude Code on
the same scripted server where the comparison is cheap. The model is the one those tests
expect (``tests/support/sdk_model.py``); ``tests/support/sdk_e2e.py`` runs the SDK's own
files the same way."""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import claude_agent_sdk
import pytest
from claude_agent_sdk import (
    AgentDefinition,
    AssistantMessage,
    ClaudeAgentOptions,
    ConversationResetMessage,
    HookMatcher,
    InMemorySessionStore,
    PermissionResultAllow,
    ProcessError,
    ResultError,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    TextBlock,
    ToolUseBlock,
    UserMessage,
    get_session_messages,
    get_session_messages_from_store,
    get_subagent_messages,
    get_subagent_messages_from_store,
    list_subagents,
    list_subagents_from_store,
)

from isoagent.parent.agent.parent_agent import INTERRUPTED_ANSWER
from tests.conftest import cli_env
from tests.support.messages_server import MessagesServer
from tests.support.sdk_model import GREETING, SLOW_TEXT, play
from tests.test_hooks import CLIS, claude_env
from tests.test_print_mode import CLAUDE, ISOAGENT_SCRIPT


def options_for(
    cli: str, server: MessagesServer, tmp_path: Path, workspace: Path, **options: Any
) -> ClaudeAgentOptions:
    """The SDK's options for ``cli`` on ``server``: its environment, then ``options``
    (whose ``env`` is added to it)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = claude_env(server, home) if cli == "claude" else cli_env(server, HOME=str(home))
    env |= options.pop("env", {})
    path = CLAUDE if cli == "claude" else ISOAGENT_SCRIPT
    return ClaudeAgentOptions(cli_path=str(path), cwd=str(workspace), env=env, **options)


def converse(options: ClaudeAgentOptions, *prompts: str | dict[str, Any]) -> list[list[Any]]:
    """Each prompt through one ``ClaudeSDKClient`` (a dict: a user message as written),
    and what came back for each, its result last."""

    async def one(message: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        yield message

    async def run() -> list[list[Any]]:
        answers = []
        async with claude_agent_sdk.ClaudeSDKClient(options) as client:
            for prompt in prompts:
                await client.query(prompt if isinstance(prompt, str) else one(prompt))
                answers.append([m async for m in client.receive_response()])
        return answers

    return asyncio.run(asyncio.wait_for(run(), 120))


@pytest.fixture
def sdk_model(api_server: MessagesServer) -> MessagesServer:
    """The server, answering as the model the SDK's e2e tests expect."""
    api_server.handler = play
    return api_server


@pytest.mark.parametrize("cli", CLIS)
def test_an_api_error_is_the_result_with_its_status_as_in_claude_code(
    cli: str, sdk_model: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """test_error_results.py: a model the API does not know. The SDK raises ``ResultError``
    carrying the error's words and HTTP status; the turn "succeeded" with an error
    (Claude Code's shape), and an assistant message says what failed."""
    model = "claude-nonexistent-model-for-sdk-e2e"
    options = options_for(cli, sdk_model, tmp_path, workspace, model=model, max_turns=1)
    seen: list[Any] = []

    async def ask() -> None:
        async for message in claude_agent_sdk.query(prompt="Reply with: pong", options=options):
            seen.append(message)

    with pytest.raises(ResultError) as raised:
        asyncio.run(asyncio.wait_for(ask(), 120))
    result = seen[-1]
    assert isinstance(result, ResultMessage) and result.is_error
    assert (result.subtype, result.terminal_reason, result.api_error_status) == (
        "success",
        "api_error",
        404,
    )
    assert result.result and result.result.strip() in str(raised.value)
    assert raised.value.api_error_status == 404
    [said] = [m for m in seen if isinstance(m, AssistantMessage)]
    assert said.error is not None and said.parent_tool_use_id is None


THINKING_CASES = [
    # (model, MAX_THINKING_TOKENS, the parent's thinking as Claude Code 2.1.332 sends it)
    ("claude-sonnet-4-5", "8000", {"type": "enabled", "budget_tokens": 8000}),
    ("claude-sonnet-4-5", "0", {"type": "disabled"}),
    ("claude-opus-4-6", "8000", {"type": "adaptive"}),
    ("claude-3-5-haiku-20241022", "", None),
]


@pytest.mark.parametrize("cli", CLIS)
def test_max_thinking_tokens_in_the_sdks_env_sets_thinking_as_claude_code_does(
    cli: str, sdk_model: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """test_include_partial_messages.py's ``env={"MAX_THINKING_TOKENS": "8000"}``: a model
    that thinks with a budget gets that one; 0 turns thinking off; a model that thinks
    adaptively ignores it; one that cannot think is sent none. Thinking streams its deltas."""
    for model, tokens, thinking in THINKING_CASES:
        sdk_model.requests.clear()
        env = {"MAX_THINKING_TOKENS": tokens} if tokens else {}
        options = options_for(
            cli, sdk_model, tmp_path, workspace, model=model, env=env, max_turns=2,
            include_partial_messages=True,
        )  # fmt: skip
        [answer] = converse(options, "Think step by step about what 2 + 2 equals")
        [request] = [r for r in sdk_model.requests if r.tool_names]
        sent = request.body.get("thinking")
        sent = {k: v for k, v in sent.items() if k != "display"} if sent else None
        assert sent == thinking, (model, tokens)
        deltas = [
            m.event["delta"]["thinking"]
            for m in answer
            if getattr(m, "event", {}).get("delta", {}).get("type") == "thinking_delta"
        ]
        assert bool(deltas) == (thinking is not None and thinking["type"] != "disabled")
        assert isinstance(answer[-1], ResultMessage) and answer[-1].result == "2 + 2 = 4"


@pytest.mark.parametrize("cli", CLIS)
def test_interrupt_stops_an_answer_already_streaming_and_the_turn_is_kept(
    cli: str, sdk_model: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """test_dynamic_control.py's interrupt, while the model's answer streams (slowly): the
    answer is cut, not waited for (its end never comes), the turn ends as an interrupted
    one, and the next message goes on with the prompt and Claude Code's words for it."""
    options = options_for(cli, sdk_model, tmp_path, workspace, include_partial_messages=True)

    async def run() -> tuple[list[Any], list[Any]]:
        async with claude_agent_sdk.ClaudeSDKClient(options) as client:
            await client.query("Count from 1 to 100 slowly.")
            cut = []
            async for message in client.receive_messages():
                cut.append(message)
                if getattr(message, "event", {}).get("type") == "content_block_delta":
                    await client.interrupt()
                    break
            cut += [m async for m in client.receive_response()]
            await client.query("Reply with exactly: two")
            return cut, [m async for m in client.receive_response()]

    cut, after = asyncio.run(asyncio.wait_for(run(), 120))
    result = cut[-1]
    assert isinstance(result, ResultMessage) and result.is_error
    assert (result.subtype, result.terminal_reason) == (
        "error_during_execution",
        "aborted_streaming",
    )
    deltas = [m.event["delta"] for m in cut if isinstance(m, StreamEvent)
              and m.event["type"] == "content_block_delta"]  # fmt: skip
    assert "".join(d.get("text", "") for d in deltas) != SLOW_TEXT
    assert SLOW_TEXT not in str(cut)  # no whole answer came
    said = [
        b.text for m in cut if isinstance(m, UserMessage) for b in m.content if hasattr(b, "text")
    ]
    assert said == [INTERRUPTED_ANSWER]
    assert isinstance(after[-1], ResultMessage) and after[-1].result == "two"
    assert after[-1].session_id == result.session_id
    last = [r for r in sdk_model.requests if r.tool_names][-1]
    kept = last.text()
    assert kept.index("Count from 1 to 100") < kept.index(INTERRUPTED_ANSWER) < kept.index("two")
    assert "assistant" not in [m["role"] for m in last.messages]  # the cut answer is not kept


@pytest.mark.parametrize("cli", CLIS)
def test_a_hook_saying_continue_false_ends_the_turn_as_a_success_after_its_result(
    cli: str, sdk_model: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """test_hooks.py's ``continue_: False`` from a PostToolUse hook: the command ran and its
    result is in the stream, then the turn ends, a success stopped by the hook, with no
    further model call."""
    heard: list[str] = []

    async def stop(data: Any, *_: Any) -> dict[str, Any]:
        heard.append(data["tool_name"])
        return {"continue_": False, "stopReason": "Execution halted by test hook"}

    hooks = {"PostToolUse": [HookMatcher(matcher="Bash", hooks=[stop])]}
    options = options_for(cli, sdk_model, tmp_path, workspace, allowed_tools=["Bash"], hooks=hooks)
    [answer] = converse(options, "Run: echo 'test message'")
    result = answer[-1]
    assert isinstance(result, ResultMessage) and not result.is_error
    assert (result.subtype, result.terminal_reason) == ("success", "hook_stopped")
    assert heard == ["Bash"]
    [ran] = [b for m in answer if isinstance(m, UserMessage) for b in m.content
             if getattr(b, "tool_use_id", None)]  # fmt: skip
    assert "test message" in str(ran.content) and not ran.is_error
    assert len([r for r in sdk_model.requests if r.tool_names]) == 1


GREETER = {
    "greeter": AgentDefinition(
        description="Replies with a short greeting. Use for greeting tasks.",
        prompt="Reply with one short friendly sentence. Do not use any tools.",
        model="haiku",
        background=False,
    )
}
GREET_PROMPT = (
    "Use the Agent tool exactly once with subagent_type 'greeter', prompt 'say hi', and "
    "run_in_background set to false. Then reply with the single word DONE."
)


@pytest.mark.parametrize("forward", [False, True], ids=["by-default", "forwarded"])
@pytest.mark.parametrize("cli", CLIS)
def test_a_subagents_words_reach_the_stream_only_when_forward_subagent_text_asks(
    cli: str, forward: bool, sdk_model: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """test_forward_subagent_text.py: by default a foreground subagent shows only its tool
    calls, never its words (nor its streamed events); with ``forward_subagent_text`` its
    text comes as an assistant message under the Agent call that started it."""
    options = options_for(
        cli, sdk_model, tmp_path, workspace, agents=GREETER, allowed_tools=["Agent", "Task"],
        max_turns=4, forward_subagent_text=forward, include_partial_messages=True,
    )  # fmt: skip
    [answer] = converse(options, GREET_PROMPT)
    assert isinstance(answer[-1], ResultMessage) and answer[-1].result == "DONE"
    [call] = [b.id for m in answer if isinstance(m, AssistantMessage) and not m.parent_tool_use_id
              for b in m.content if isinstance(b, ToolUseBlock)]  # fmt: skip
    words = [b.text for m in answer if isinstance(m, AssistantMessage) and m.parent_tool_use_id
             for b in m.content if isinstance(b, TextBlock)]  # fmt: skip
    assert words == ([GREETING] if forward else [])
    assert {getattr(m, "parent_tool_use_id", None) for m in answer} <= {None, call}
    assert not [m for m in answer if isinstance(m, StreamEvent) and m.parent_tool_use_id]


@pytest.mark.parametrize("cli", CLIS)
def test_a_user_messages_origin_comes_back_on_its_result(
    cli: str, sdk_model: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """test_message_origin.py: a host stamps ``origin`` on the message it sends; that turn's
    result carries it back, an unstamped one's none."""
    options = options_for(cli, sdk_model, tmp_path, workspace, max_turns=1)
    stamped, unstamped = converse(
        options,
        {"type": "user", "message": {"role": "user", "content": "Reply with exactly: one"},
         "parent_tool_use_id": None, "origin": {"kind": "human"}},
        {"type": "user", "message": {"role": "user", "content": "Reply with exactly: two"},
         "parent_tool_use_id": None},
    )  # fmt: skip
    assert isinstance(stamped[-1], ResultMessage) and stamped[-1].origin == {"kind": "human"}
    assert isinstance(unstamped[-1], ResultMessage) and unstamped[-1].origin is None
    assert (stamped[-1].result, unstamped[-1].result) == ("one", "two")


NESTED = {
    "type": "object",
    "properties": {
        "analysis": {
            "type": "object",
            "properties": {"word_count": {"type": "number"}, "character_count": {"type": "number"}},
            "required": ["word_count", "character_count"],
        },
        "words": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["analysis", "words"],
}
FILES = {
    "type": "object",
    "properties": {"file_count": {"type": "number"}, "has_readme": {"type": "boolean"}},
    "required": ["file_count", "has_readme"],
}


@pytest.mark.parametrize("cli", CLIS)
def test_structured_output_ends_the_turn_without_another_model_call(
    cli: str, sdk_model: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """test_structured_output.py: the answer given through StructuredOutput is the result's
    structured_output, and the turn ends there: no model call after it (one more used to
    ask the model for words nobody reads), with or without a tool call before it."""
    (workspace / "README.md").write_text("# hi\n")
    (workspace / "main.py").write_text("print('hi')\n")
    cases = [
        ("Analyze this text: 'Hello world'. Provide word count, character count, and list of "
         "words.", NESTED, {"analysis": {"word_count": 2, "character_count": 11},
                            "words": ["Hello", "world"]}, 1),
        ("Count how many files are in the current directory and check if there's a README "
         "file. Use tools as needed.", FILES, {"file_count": 2, "has_readme": True}, 2),
    ]  # fmt: skip
    for prompt, schema, answer, calls in cases:
        sdk_model.requests.clear()
        options = options_for(
            cli, sdk_model, tmp_path, workspace, permission_mode="acceptEdits",
            output_format={"type": "json_schema", "schema": schema},
        )  # fmt: skip
        [said] = converse(options, prompt)
        result = said[-1]
        assert isinstance(result, ResultMessage) and not result.is_error, result
        assert result.structured_output == answer
        assert len([r for r in sdk_model.requests if r.tool_names]) == calls


@pytest.mark.parametrize("cli", CLIS)
def test_a_hook_answer_naming_another_event_is_rejected(
    cli: str, sdk_model: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """A hook's ``hookSpecificOutput`` is for the event it was asked about: a PreToolUse
    hook that answers as PostToolUse (here: allow) fails closed, its command does not run;
    a PostToolUse one that answers as PreToolUse adds nothing to the result."""

    def answering_as(named: str) -> Any:
        async def hook(*_: Any) -> dict[str, Any]:
            return {"hookSpecificOutput": {"hookEventName": named, "permissionDecision": "allow",
                                           "additionalContext": "FROM THE HOOK"}}  # fmt: skip

        return [HookMatcher(matcher="Bash", hooks=[hook])]

    for event, named in (("PreToolUse", "PostToolUse"), ("PostToolUse", "PreToolUse")):
        sdk_model.requests.clear()
        options = options_for(
            cli, sdk_model, tmp_path, workspace, allowed_tools=["Bash"],
            hooks={event: answering_as(named)},
        )  # fmt: skip
        [answer] = converse(options, "Run the command: touch made.txt && echo ran")
        assert isinstance(answer[-1], ResultMessage) and not answer[-1].is_error
        [seen] = [r for r in sdk_model.requests if r.tool_names and r.tool_results]
        said = str(seen.tool_results[0]["content"])
        assert "FROM THE HOOK" not in said
        assert (workspace / "made.txt").exists() == (event == "PostToolUse"), event
        assert seen.tool_results[0].get("is_error", False) == (event == "PreToolUse")
        (workspace / "made.txt").unlink(missing_ok=True)


@pytest.mark.parametrize("cli", CLIS)
def test_can_use_tool_is_asked_only_what_claude_code_asks_with_its_suggestions(
    cli: str, sdk_model: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """test_tool_permissions.py's callback: a command that only reads in the workspace runs
    unasked (``ls``, ``echo``, ``grep -r . .``), one that writes or reads elsewhere is asked,
    with Claude Code's suggestions (the exact Bash rule; a Read rule for the folder outside;
    acceptEdits for a file change) and the path that made it a question."""
    asked: list[tuple[str, dict[str, Any], Any]] = []

    async def allow(tool: str, args: dict[str, Any], context: Any) -> PermissionResultAllow:
        asked.append((tool, args, context))
        return PermissionResultAllow()

    commands = ["ls", "echo hi", "grep -r hello .", "cat /etc/hostname", "touch made.txt"]
    options = options_for(cli, sdk_model, tmp_path, workspace, can_use_tool=allow)
    converse(options, *(f"Run exactly: {command}" for command in commands))
    assert [args["command"] for _, args, _ in asked] == ["cat /etc/hostname", "touch made.txt"]
    (_, _, reading), (_, _, touching) = asked
    assert [(s.type, s.destination, [(r.tool_name, r.rule_content) for r in s.rules or []])
            for s in reading.suggestions] == [
        ("addRules", "localSettings", [("Bash", "cat /etc/hostname")]),
        ("addRules", "session", [("Read", "//etc/**")]),
    ]  # fmt: skip
    assert reading.blocked_path == "/etc/hostname"
    assert [(s.type, s.mode, s.directories) for s in touching.suggestions] == [
        ("addRules", None, None), ("addDirectories", None, [str(workspace)]),
        ("setMode", "acceptEdits", None),
    ]  # fmt: skip
    assert touching.blocked_path == str(workspace / "made.txt")
    assert (workspace / "made.txt").exists()


@pytest.mark.parametrize("cli", CLIS)
def test_clear_starts_a_new_session_and_says_so(
    cli: str, sdk_model: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """test_conversation_reset.py: ``/clear`` mid-session: a ConversationResetMessage stamped
    with the old session, then a result of the new one, and the next message starts afresh
    (its request holds nothing of before)."""
    options = options_for(cli, sdk_model, tmp_path, workspace, max_turns=1)
    first, cleared, after = converse(
        options, "Reply with exactly: one", "/clear", "Reply with exactly: two"
    )
    old = first[-1].session_id
    [reset] = [m for m in cleared if isinstance(m, ConversationResetMessage)]
    assert reset.session_id == old and reset.new_conversation_id and reset.uuid
    assert isinstance(cleared[-1], ResultMessage) and not cleared[-1].is_error
    assert cleared[-1].session_id != old
    assert isinstance(after[-1], ResultMessage) and after[-1].result == "two"
    assert after[-1].session_id == cleared[-1].session_id
    last = [r for r in sdk_model.requests if r.tool_names][-1]
    assert "Reply with exactly: one" not in last.text()


def write_commands(root: Path) -> None:
    commands = root / ".claude" / "commands"
    (commands / "sub").mkdir(parents=True)
    (commands / "testcmd.md").write_text(
        "---\ndescription: Test command\nargument-hint: [thing]\n---\n\n"
        "Reply with exactly: $ARGUMENTS\n"
    )
    (commands / "sub" / "deep.md").write_text("Reply with exactly: deep\n")


@pytest.mark.parametrize("cli", CLIS)
def test_a_projects_commands_are_listed_and_run_as_claude_code_runs_them(
    cli: str, sdk_model: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """test_agents_and_settings.py's commands: ``.claude/commands/*.md`` (a sub-folder's as
    ``sub:name``) are listed in init and ``get_server_info()``, and run with their
    arguments; ``setting_sources=["user"]`` leaves the project's out."""
    write_commands(workspace)
    options = options_for(cli, sdk_model, tmp_path, workspace, max_turns=1)

    async def run() -> tuple[dict[str, Any] | None, list[list[Any]]]:
        async with claude_agent_sdk.ClaudeSDKClient(options) as client:
            info = await client.get_server_info()
            answers = []
            for prompt in ("/testcmd hello there", "/sub:deep"):
                await client.query(prompt)
                answers.append([m async for m in client.receive_response()])
            return info, answers

    info, (said, deep) = asyncio.run(asyncio.wait_for(run(), 120))
    assert info is not None
    listed = {c["name"]: c for c in info["commands"]}
    assert listed["testcmd"]["description"] == "Test command (project)"
    assert listed["testcmd"]["argumentHint"] == "thing" and "sub:deep" in listed
    init = next(m for m in said if isinstance(m, SystemMessage) and m.subtype == "init")
    assert {"testcmd", "sub:deep", "clear"} <= set(init.data["slash_commands"])
    assert isinstance(said[-1], ResultMessage) and said[-1].result == "hello there"
    assert isinstance(deep[-1], ResultMessage) and deep[-1].result == "deep"
    asked = next(r for r in sdk_model.requests if r.tool_names).text()
    assert "<command-name>/testcmd</command-name>" in asked

    options = options_for(cli, sdk_model, tmp_path, workspace, max_turns=1,
                          setting_sources=["user"])  # fmt: skip
    [users] = converse(options, "What is 2 + 2?")
    init = next(m for m in users if isinstance(m, SystemMessage) and m.subtype == "init")
    assert "testcmd" not in init.data["slash_commands"]


def test_an_unknown_slash_command_is_refused_by_name(
    sdk_model: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """A ``/name`` isoagent has no command for is an error result naming it, not a prompt
    (Claude Code sends it to the model); a prompt that is a path is a prompt; a command
    file that runs shell lines is refused, and the session goes on."""
    commands = workspace / ".claude" / "commands"
    commands.mkdir(parents=True)
    (commands / "shell.md").write_text("Status: !`git status`\n")
    options = options_for("isoagent", sdk_model, tmp_path, workspace, max_turns=1)
    unknown, shell, path = converse(options, "/nosuchcmd now", "/shell", "/tmp/x Say hello")
    assert isinstance(unknown[-1], ResultMessage) and unknown[-1].is_error
    assert unknown[-1].result == "Unknown slash command: /nosuchcmd"
    assert isinstance(shell[-1], ResultMessage) and "runs shell lines" in str(shell[-1].result)
    assert isinstance(path[-1], ResultMessage) and path[-1].result == "Hello!"
    assert len([r for r in sdk_model.requests if r.tool_names]) == 1


def init_of(answer: list[Any]) -> dict[str, Any]:
    return next(m.data for m in answer if isinstance(m, SystemMessage) and m.subtype == "init")


@pytest.mark.parametrize("cli", CLIS)
def test_the_settings_output_style_is_reported_and_used(
    cli: str, sdk_model: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """test_agents_and_settings.py and test_session_store_resume_settings.py: ``outputStyle``
    of ``.claude/settings.local.json`` (or the user's settings, in ``CLAUDE_CONFIG_DIR``) is
    init's ``output_style``; a style file's words reach the main agent's system prompt."""
    local = workspace / ".claude" / "settings.local.json"
    local.parent.mkdir()
    local.write_text(json.dumps({"outputStyle": "local-test-style"}))
    options = options_for(cli, sdk_model, tmp_path, workspace, max_turns=1)
    assert init_of(converse(options, "What is 2 + 2?")[0])["output_style"] == "local-test-style"
    styles = workspace / ".claude" / "output-styles"
    styles.mkdir()
    (styles / "terse.md").write_text("---\nname: terse\ndescription: d\n---\n\nANSWER TERSELY.\n")
    local.write_text(json.dumps({"outputStyle": "terse"}))
    sdk_model.requests.clear()
    assert init_of(converse(options, "What is 2 + 2?")[0])["output_style"] == "terse"
    assert "ANSWER TERSELY." in json.dumps(next(r for r in sdk_model.requests if r.tool_names).body)

    local.unlink()
    config = tmp_path / "config"
    config.mkdir()
    (config / "settings.json").write_text(json.dumps({"outputStyle": "Explanatory"}))
    options = options_for(cli, sdk_model, tmp_path, workspace, max_turns=1,
                          env={"CLAUDE_CONFIG_DIR": str(config)})  # fmt: skip
    assert init_of(converse(options, "What is 2 + 2?")[0])["output_style"] == "Explanatory"


@pytest.mark.parametrize("cli", CLIS)
def test_notification_hooks_run_and_their_input_is_claude_codes(
    cli: str, sdk_model: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """test_hook_events.py: a Notification hook registers beside PreToolUse and PostToolUse
    (isoagent refused it), and each runs; a Notification, when one comes (isoagent's: the
    parent waits for can_use_tool's answer), has Claude Code's shape."""
    heard: list[dict[str, Any]] = []

    async def track(data: Any, *_: Any) -> dict[str, Any]:
        heard.append(data)
        return {}

    async def allow(*_: Any) -> PermissionResultAllow:
        return PermissionResultAllow()

    hooks = {event: [HookMatcher(matcher=None if event == "Notification" else "Bash",
                                 hooks=[track])]
             for event in ("Notification", "PreToolUse", "PostToolUse")}  # fmt: skip
    options = options_for(cli, sdk_model, tmp_path, workspace, hooks=hooks, can_use_tool=allow)
    [answer] = converse(options, "Run exactly: touch made.txt")
    assert isinstance(answer[-1], ResultMessage) and not answer[-1].is_error
    events = [data["hook_event_name"] for data in heard]
    assert {"PreToolUse", "PostToolUse"} <= set(events)
    for data in heard:
        if data["hook_event_name"] == "Notification":
            assert data["message"] and data["notification_type"]
    if cli == "isoagent":
        notice = next(d for d in heard if d["hook_event_name"] == "Notification")
        assert (notice["notification_type"], notice["message"]) == (
            "permission_prompt", "Claude needs your permission to use Bash",
        )  # fmt: skip


@pytest.fixture
def claude_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Claude Code's folder for the CLI and for the SDK's readers in this process."""
    folder = tmp_path / "claude-folder"
    folder.mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(folder))
    return folder


def prompts_of(session: str, workspace: Path) -> list[str]:
    return [
        m.message["content"]
        for m in get_session_messages(session, directory=str(workspace))
        if m.type == "user" and isinstance(m.message.get("content"), str)
    ]


@pytest.mark.parametrize("cli", CLIS)
def test_the_sdk_reads_the_session_and_resume_session_at_forks_it_there(
    cli: str, sdk_model: MessagesServer, tmp_path: Path, workspace: Path, claude_folder: Path
) -> None:
    """test_truncating_resume.py: ``get_session_messages`` reads the session (the stream's
    uuids, one prompt after the other); resuming at turn 1's last answer, dropping turn 2,
    forks a session of turns 1 and 3 and leaves the first whole; naming a turn that does
    not follow is refused, and nothing is forked."""
    env = {"CLAUDE_CONFIG_DIR": str(claude_folder)}
    options = options_for(cli, sdk_model, tmp_path, workspace, max_turns=1, env=env)
    one, two = converse(options, "Reply with exactly: one", "Reply with exactly: two")
    session = two[-1].session_id
    answered = [m for m in one if isinstance(m, AssistantMessage)][-1].uuid
    chain = get_session_messages(session, directory=str(workspace))
    uuids = [m.uuid for m in chain]
    second = next(
        i for i, m in enumerate(chain) if m.message.get("content") == "Reply with exactly: two"
    )
    assert second == uuids.index(answered) + 1

    def fork(drops: str) -> list[Any]:
        forked = options_for(
            cli, sdk_model, tmp_path, workspace, max_turns=1, env=env, resume=session,
            fork_session=True, resume_session_at=answered, resume_drops_turn=drops,
        )  # fmt: skip

        async def ask() -> list[Any]:
            return [m async for m in claude_agent_sdk.query(prompt="Reply with exactly: three",
                                                             options=forked)]  # fmt: skip

        return asyncio.run(asyncio.wait_for(ask(), 120))

    with pytest.raises(ProcessError, match="Resume rejected by --resume-drops-turn:"):
        fork(str(uuid.uuid4()))
    result = fork(chain[second].uuid)[-1]
    assert isinstance(result, ResultMessage) and not result.is_error
    assert result.session_id != session and result.result == "three"
    assert prompts_of(result.session_id, workspace) == [
        "Reply with exactly: one", "Reply with exactly: three",
    ]  # fmt: skip
    assert prompts_of(session, workspace) == ["Reply with exactly: one", "Reply with exactly: two"]


@pytest.mark.parametrize("cli", CLIS)
def test_a_session_store_gets_the_session_and_brings_it_back(
    cli: str, sdk_model: MessagesServer, tmp_path: Path, workspace: Path, claude_folder: Path
) -> None:
    """test_session_store_resume_settings.py and test_subagent_session_reads.py: with a
    ``session_store`` the session's entries reach the store (the subagents' too, with the
    Agent call that started each); once every file on disk is gone (the run folders too),
    ``resume`` brings the session back from the store and the conversation goes on."""
    store = InMemorySessionStore()
    env = {"CLAUDE_CONFIG_DIR": str(claude_folder)}
    options = options_for(
        cli, sdk_model, tmp_path, workspace, env=env, session_store=store, agents=GREETER,
        allowed_tools=["Agent", "Task"], max_turns=4,
    )  # fmt: skip
    [first] = converse(options, GREET_PROMPT)
    session = first[-1].session_id
    [call] = [b.id for m in first if isinstance(m, AssistantMessage) and not m.parent_tool_use_id
              for b in m.content if isinstance(b, ToolUseBlock)]  # fmt: skip

    async def read_store() -> tuple[list[Any], dict[str, list[Any]]]:
        key = str(workspace)
        main = await get_session_messages_from_store(store, session, directory=key)
        agents = await list_subagents_from_store(store, session, directory=key)
        subagents = {a: await get_subagent_messages_from_store(store, session, a, directory=key)
                     for a in agents}  # fmt: skip
        return main, subagents

    main, subagents = asyncio.run(read_store())
    assert GREET_PROMPT in [m.message.get("content") for m in main]
    greeter = [messages for messages in subagents.values() if messages]
    assert greeter and {m.parent_tool_use_id for m in greeter[0]} == {call}
    local = {a: get_subagent_messages(session, a, directory=str(workspace))
             for a in list_subagents(session, directory=str(workspace))}  # fmt: skip
    assert any({m.parent_tool_use_id for m in ms} == {call} for ms in local.values() if ms)

    shutil.rmtree(claude_folder / "projects")
    shutil.rmtree(workspace / ".isoagent", ignore_errors=True)
    sdk_model.requests.clear()
    again = options_for(cli, sdk_model, tmp_path, workspace, env=env, session_store=store,
                        resume=session, max_turns=1)  # fmt: skip
    [after] = converse(again, "Reply with exactly: two")
    assert isinstance(after[-1], ResultMessage) and after[-1].result == "two"
    assert after[-1].session_id == session
    asked = next(r for r in sdk_model.requests if r.tool_names and "two" in r.text())
    assert GREET_PROMPT in asked.text()  # the conversation came back from the store


@pytest.mark.parametrize("cli", CLIS)
def test_a_plugins_commands_are_listed_and_run_under_its_name(
    cli: str, sdk_model: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """examples/plugin_example.py: a plugin's ``commands/*.md`` are ``/plugin:name``, listed
    in init and run with their arguments, beside its agents (isoagent refused the plugin)."""
    plugin = tmp_path / "demo"
    (plugin / ".claude-plugin").mkdir(parents=True)
    (plugin / ".claude-plugin" / "plugin.json").write_text('{"name": "demo-plugin"}')
    (plugin / "commands").mkdir()
    (plugin / "commands" / "greet.md").write_text("Reply with exactly: $ARGUMENTS\n")
    options = options_for(cli, sdk_model, tmp_path, workspace, max_turns=1,
                          plugins=[{"type": "local", "path": str(plugin)}])  # fmt: skip
    [said] = converse(options, "/demo-plugin:greet hi there")
    assert "demo-plugin:greet" in init_of(said)["slash_commands"]
    assert isinstance(said[-1], ResultMessage) and said[-1].result == "hi there"


@pytest.mark.parametrize("cli", CLIS)
def test_an_interrupt_sent_as_the_turn_starts_is_not_lost(
    cli: str, sdk_model: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """examples/streaming_mode.py's interrupt, sent before the turn's first message came
    back (isoagent may still be starting the run): the turn is interrupted as one whose
    answer was to come, its answer never comes whole, and the next message is answered."""
    options = options_for(cli, sdk_model, tmp_path, workspace)

    async def run() -> tuple[list[Any], list[Any]]:
        async with claude_agent_sdk.ClaudeSDKClient(options) as client:
            await client.query("Count from 1 to 100 slowly.")
            await client.interrupt()
            cut = [m async for m in client.receive_response()]
            await client.query("Reply with exactly: two")
            return cut, [m async for m in client.receive_response()]

    cut, after = asyncio.run(asyncio.wait_for(run(), 120))
    result = cut[-1]
    assert isinstance(result, ResultMessage)
    assert (result.subtype, result.terminal_reason) == (
        "error_during_execution", "aborted_streaming",
    )  # fmt: skip
    said = [b.text for m in cut if isinstance(m, UserMessage) for b in m.content
            if hasattr(b, "text")]  # fmt: skip
    assert said == [INTERRUPTED_ANSWER] and SLOW_TEXT not in str(cut)
    assert isinstance(after[-1], ResultMessage) and after[-1].result == "two"
