"""The claude-agent-sdk's options against isoagent: each flag the SDK sends works as in Claude
Code or is refused by name, never click's exit 2 on an unknown option.

Most tests run the exact command line the SDK builds for an option (its own
``SubprocessCLITransport``) in-process, with the prompt as ``-p``; those about the control
protocol run the SDK itself with ``cli_path`` = isoagent."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import claude_agent_sdk
import pytest
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage
from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport

import isoagent
from isoagent.parent.agent.parent_agent import INTERRUPTED
from isoagent.parent.cli.sdk_options import REFUSED
from isoagent.parent.model.aliases import CURRENT_MODELS
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import (
    MessagesServer,
    Reply,
    Request,
    error_reply,
    text_reply,
    tool_reply,
    tools_reply,
)
from tests.test_print_mode import needs_claude, run_both

ISOAGENT_SCRIPT = Path(sys.executable).with_name("isoagent")


def sdk_args(**options: Any) -> list[str]:
    """The arguments the SDK starts its CLI with for ``ClaudeAgentOptions(**options)``,
    with ``--input-format stream-json`` left out (the prompt goes as ``-p``)."""
    transport = SubprocessCLITransport("", ClaudeAgentOptions(cli_path="isoagent", **options))
    args = transport._build_command()[1:]
    assert args[-2:] == ["--input-format", "stream-json"]
    return args[:-2]


def run_sdk_args(
    server: MessagesServer, tmp_path: Path, workspace: Path, prompt: str, **options: Any
) -> Any:
    """isoagent run in-process as the SDK would start it for ``options``; the result line."""
    env = cli_env(server, HOME=str(tmp_path / "home"))
    done = run_cli(["-p", prompt, *sdk_args(**options)], env, cwd=workspace, input="")
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines and lines[-1]["type"] == "result", done.stderr
    return lines


# every SDK option that becomes a flag isoagent refuses, with a value that sends it
REFUSED_OPTIONS: dict[str, dict[str, Any]] = {
    "--resume-session-at": {"resume_session_at": "u1"},
    "--resume-drops-turn": {"resume_drops_turn": "u1"},
    "--session-mirror": {"session_store": object()},
}


@pytest.mark.parametrize("flag", sorted(REFUSED))
def test_an_sdk_option_isoagent_cannot_honour_is_refused_by_name(
    flag: str, api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    args = sdk_args(**REFUSED_OPTIONS[flag])
    assert flag in " ".join(args).replace("=", " ").split()
    env = cli_env(api_server, HOME=str(tmp_path))
    done = run_cli(["-p", "hi", *args], env, cwd=workspace, input="")
    assert done.returncode == 1
    assert done.stderr.startswith(f"isoagent: error: {flag} is not supported: "), done.stderr
    assert done.stderr.count("\n") == 1
    assert api_server.requests == []


def test_the_sdk_hears_a_refused_option_as_the_answer_to_initialize(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    options = ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT),
        cwd=str(workspace),
        env=cli_env(api_server, HOME=str(tmp_path)),
        resume_session_at="u1",
    )

    async def ask() -> None:
        async for _ in claude_agent_sdk.query(prompt="hi", options=options):
            pass

    with pytest.raises(Exception, match="--resume-session-at is not supported: isoagent"):
        asyncio.run(asyncio.wait_for(ask(), 60))
    assert api_server.requests == []


@pytest.mark.parametrize("value", [None, "v", "-v"])
def test_the_sdk_hears_an_unknown_extra_arg_refused_by_name_at_initialize(
    value: str | None, api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    options = ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT),
        cwd=str(workspace),
        env=cli_env(api_server, HOME=str(tmp_path)),
        extra_args={"no-such-flag": value},
    )

    async def ask() -> None:
        async for _ in claude_agent_sdk.query(prompt="hi", options=options):
            pass

    refusal = "--no-such-flag is not supported: isoagent does not know this flag"
    with pytest.raises(Exception, match=refusal):
        asyncio.run(asyncio.wait_for(ask(), 60))
    assert api_server.requests == []


def test_debug_to_stderr_from_the_sdk_is_accepted(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    api_server.handler = lambda req: text_reply("fine")
    lines = run_sdk_args(
        api_server, tmp_path, workspace, "hi", extra_args={"debug-to-stderr": None}
    )
    assert lines[-1]["result"] == "fine"


def test_a_misspelt_flag_in_print_mode_is_clicks_error_with_the_nearest_name(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    done = run_cli(["-p", "--modle", "x", "hi"], cli_env(api_server), cwd=workspace, input="")
    assert done.returncode == 2
    assert "No such option '--modle'. Did you mean '--model'?" in done.stderr
    assert done.stderr.count("\n") == 1 and api_server.requests == []


def test_tools_sets_the_parents_base_tools(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """The SDK's ``tools``: the set the parent has (``Agent`` only if named), ``[]`` none;
    ``allowed_tools`` chooses among them, as the permission mode says."""
    api_server.handler = lambda req: text_reply(",".join(req.tool_names) or "none")
    cases = [
        ({"tools": ["Bash", "Read"]}, "Bash,Read"),
        ({"tools": ["Read", "Grep", "Task"]}, "Read,Grep,Agent,SendMessage"),
        ({"tools": []}, "none"),
        ({"tools": {"type": "preset", "preset": "claude_code"}}, "Bash,Read,Write,"
         "Edit,Glob,Grep,Agent,SendMessage"),
        ({"tools": ["Read", "Write", "Bash"], "allowed_tools": ["Write"]}, "Read,Write"),
        # nobody to ask: acceptEdits adds the edits, bypassPermissions asks for nothing
        ({"allowed_tools": ["Bash(git:*)"], "permission_mode": "acceptEdits"},
         "Read,Glob,Grep,Bash,Write,Edit,Agent,SendMessage"),
        ({"allowed_tools": ["Read"], "permission_mode": "bypassPermissions"},
         "Bash,Read,Write,Edit,Glob,Grep,Agent,SendMessage"),
    ]  # fmt: skip
    for options, tools in cases:
        lines = run_sdk_args(api_server, tmp_path, workspace, "hi", **options)
        assert lines[-1]["result"] == tools, options
        assert lines[0]["tools"] == (tools.split(",") if tools != "none" else []), options


def test_system_prompt_files_and_setting_sources(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """``system_prompt={"type": "file"}`` and ``--append-system-prompt-file`` read their files;
    ``setting_sources`` chooses whose agent files are offered."""
    api_server.handler = lambda req: text_reply(req.system)
    prompt = tmp_path / "prompt.md"
    prompt.write_text("YOU ARE A FILE PROMPT")
    lines = run_sdk_args(
        api_server, tmp_path, workspace, "hi", system_prompt={"type": "file", "path": str(prompt)}
    )
    assert lines[-1]["result"] == "YOU ARE A FILE PROMPT"

    env = cli_env(api_server, HOME=str(tmp_path / "home"))
    done = run_cli(
        ["-p", "hi", "--append-system-prompt-file", str(prompt)], env, cwd=workspace, input=""
    )
    assert done.stdout.startswith("You are isoagent") and "\n\nYOU ARE A FILE PROMPT" in done.stdout
    both = run_cli(
        ["-p", "hi", "--system-prompt", "x", "--system-prompt-file", str(prompt)],
        env, cwd=workspace, input="",
    )  # fmt: skip
    assert both.returncode == 2 and "cannot be used together" in both.stderr

    for where in (tmp_path / "home" / ".claude" / "agents", workspace / ".claude" / "agents"):
        where.mkdir(parents=True)
        name = "mine" if "home" in str(where) else "ours"
        (where / f"{name}.md").write_text(f"---\nname: {name}\ndescription: d\n---\np\n")
    for sources, present in (
        (None, {"mine", "ours"}), (["project"], {"ours"}), (["user"], {"mine"}), ([], set()),
    ):  # fmt: skip
        lines = run_sdk_args(api_server, tmp_path, workspace, "hi", setting_sources=sources)
        assert {"mine", "ours"} & set(lines[0]["agents"]) == present, sources


def test_include_hook_events_is_accepted(
    api_server: MessagesServer, tmp_path: Path, workspace: Path, request: Any
) -> None:
    lines = run_sdk_args(api_server, tmp_path, workspace, "hi", include_hook_events=True)
    assert lines[-1]["result"] == "ok"


def delegating(command: str, answer: Callable[[Request], str]) -> Callable[[Request], Reply]:
    """A parent that starts one general-purpose child, which runs ``command``; then each
    answers ``answer(request)``."""

    def handler(req: Request) -> Reply:
        if req.is_parent and req.turn == 0:
            task = {"description": "d", "prompt": "work", "subagent_type": "general-purpose"}
            return tool_reply("Agent", task)
        if not req.is_parent and req.turn == 0:
            return tool_reply("Bash", {"command": command})
        return text_reply(answer(req))

    return handler


def test_max_budget_usd_ends_the_run_children_included(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """Each call costs $0.00007 on sonnet (10 tokens in, 5 out): with $0.0002 the third
    call crosses the line, made by the child; the child's next call and the parent's are
    refused, and the run ends as Claude Code's does (error_max_budget_usd)."""

    def delegate_then_loop(req: Request) -> Reply:
        if req.is_parent:
            return tool_reply(
                "Agent", {"description": "d", "prompt": "loop", "subagent_type": "general-purpose"}
            )
        return tool_reply("Bash", {"command": "echo step"})

    api_server.handler = delegate_then_loop
    lines = run_sdk_args(
        api_server, tmp_path, workspace, "go", model="sonnet", max_budget_usd=0.0002, max_turns=6
    )
    result = lines[-1]
    assert (result["subtype"], result["is_error"]) == ("error_max_budget_usd", True)
    assert result["terminal_reason"] == "budget_exhausted"
    assert "Reached maximum budget ($0.0002)" in result["errors"][0]
    assert [r.is_parent for r in api_server.requests] == [True, False, False]
    (child,) = result["children"]
    assert child["result"]["status"] == "budget"
    assert result["total_cost_usd"] == pytest.approx(0.00021)


def test_the_budget_holds_for_a_clients_whole_session(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """As in Claude Code, ``max_budget_usd`` is the session's, not each message's: a
    ClaudeSDKClient's later messages spend what the earlier ones left ($0.00007 a call),
    and each result's total_cost_usd is the session's so far."""
    api_server.handler = lambda req: text_reply("ok")
    env = cli_env(api_server, HOME=str(tmp_path))
    options = ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT), cwd=str(workspace), env=env, model="sonnet",
        max_budget_usd=0.0002,
    )  # fmt: skip

    async def talk() -> list[ResultMessage]:
        results = []
        async with claude_agent_sdk.ClaudeSDKClient(options) as client:
            for n in range(4):
                await client.query(f"message {n}")
                async for message in client.receive_response():
                    if isinstance(message, ResultMessage):
                        results.append(message)
        return results

    results = asyncio.run(asyncio.wait_for(talk(), 90))
    assert [r.subtype for r in results] == ["success"] * 3 + ["error_max_budget_usd"]
    assert len(api_server.requests) == 3
    costs = [r.total_cost_usd for r in results]  # the session's so far, as Claude Code's
    assert costs == pytest.approx([0.00007, 0.00014, 0.00021, 0.00021])


def test_fallback_model_answers_once_the_model_is_overloaded(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """As Claude Code: three 529s in a row for the model, then the call goes on with the
    fallback model; a fallback that is the model itself is refused."""
    sonnet, haiku = CURRENT_MODELS["sonnet"], CURRENT_MODELS["haiku"]

    def overloaded(req: Request) -> Reply:
        if req.model == sonnet:
            return error_reply(529, "overloaded_error", "Overloaded")
        return text_reply(f"answered by {req.model}")

    api_server.handler = overloaded
    lines = run_sdk_args(
        api_server, tmp_path, workspace, "hi", model="sonnet", fallback_model="haiku"
    )
    assert lines[-1]["result"] == f"answered by {haiku}"
    assert [r.model for r in api_server.requests] == [sonnet] * 3 + [haiku]
    fallback, answer = lines[1:3]  # as Claude Code says it, and whose answer it is
    assert (fallback["subtype"], fallback["original_model"]) == ("model_fallback", sonnet)
    assert fallback["fallback_model"] == answer["message"]["model"] == haiku
    assert lines[-1]["total_cost_usd"] == pytest.approx(7.5e-6)  # haiku's price, not sonnet's

    env = cli_env(api_server, HOME=str(tmp_path))
    same = ["-p", "x", *sdk_args(model="haiku", fallback_model="haiku")]
    done = run_cli(same, env, cwd=workspace, input="")
    assert done.returncode == 2 and "is the model itself" in done.stderr


SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


def test_json_schema_gives_structured_output_as_claude_code_does(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """The model answers through the StructuredOutput tool: a call that does not fit is
    an error it reads; five end the run; an answer without the tool is asked for once."""
    output_format = {"type": "json_schema", "schema": SCHEMA}

    def answers(req: Request) -> Reply:
        assert "StructuredOutput" in req.tool_names
        if req.first_user_text == "fits":
            answers = [{"answer": "many"}, {"answer": 42}]
            if req.turn < len(answers):
                return tool_reply("StructuredOutput", answers[req.turn])
            return text_reply("done")
        if req.first_user_text == "never fits":
            return tool_reply("StructuredOutput", {"answer": "many"})
        return text_reply("plain words")

    api_server.handler = answers
    result = run_sdk_args(api_server, tmp_path, workspace, "fits", output_format=output_format)[-1]
    assert (result["subtype"], result["structured_output"]) == ("success", {"answer": 42})
    assert result["result"] == '{"answer":42}'
    error = api_server.requests[1].tool_results[0]
    assert error["is_error"] and error["content"] == (
        "Output does not match required schema: /answer: 'many' is not of type 'integer'"
    )

    result = run_sdk_args(
        api_server, tmp_path, workspace, "never fits", output_format=output_format
    )[-1]
    assert result["subtype"] == "error_max_structured_output_retries" and result["is_error"]
    assert result["errors"][0].startswith("Failed to provide valid structured output after 5")
    assert result["num_turns"] == 5

    api_server.requests.clear()
    result = run_sdk_args(api_server, tmp_path, workspace, "in words", output_format=output_format)[
        -1
    ]
    assert (result["subtype"], result["result"]) == ("success", "plain words")
    assert "structured_output" not in result
    assert "You MUST call the StructuredOutput tool" in api_server.requests[1].text()

    result = run_sdk_args(
        api_server, tmp_path, workspace, "fits", output_format=output_format, max_turns=2
    )[-1]  # a valid answer, then the turn limit: the run did not end well
    assert result["subtype"] == "error_max_turns" and "structured_output" not in result

    env = cli_env(api_server, HOME=str(tmp_path))
    bad = run_cli(["-p", "x", "--json-schema", '{"type": 5}'], env, cwd=workspace, input="")
    assert bad.returncode == 2 and "not a valid JSON schema" in bad.stderr


def test_the_sdks_client_gets_its_result_with_sdk_flags(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """One real SDK session with the options that work: the process boundary and the
    control protocol, once."""

    def answer(req: Request) -> Reply:
        if req.turn == 0:
            return tool_reply("StructuredOutput", {"answer": len(req.tool_names)})
        return text_reply("done")

    api_server.handler = answer
    options = ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT),
        cwd=str(workspace),
        env=cli_env(api_server, HOME=str(tmp_path)),
        tools=["Read", "Glob"],
        setting_sources=["project"],
        include_hook_events=True,
        output_format={"type": "json_schema", "schema": SCHEMA},
    )

    async def ask() -> list[Any]:
        return [m async for m in claude_agent_sdk.query(prompt="hi", options=options)]

    messages = asyncio.run(asyncio.wait_for(ask(), 60))
    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.structured_output == {"answer": 3}
    assert api_server.requests[0].tool_names == ["Read", "Glob", "StructuredOutput"]


SESSION = "11111111-2222-3333-4444-555555555555"


def test_session_ids_resume_and_fork_as_in_claude_code(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """``session_id`` names the session; ``resume`` goes on with it under the same id (by
    session id or run id); ``fork_session`` goes on under a new one; init says the
    permission mode the run has."""
    api_server.handler = lambda req: text_reply(f"{len(req.messages)} messages")
    first = run_sdk_args(api_server, tmp_path, workspace, "one", session_id=SESSION)
    assert first[0]["session_id"] == first[-1]["session_id"] == SESSION
    assert first[0]["run_id"] != SESSION

    again = run_sdk_args(
        api_server, tmp_path, workspace, "two", resume=SESSION, permission_mode="plan"
    )
    assert again[-1]["session_id"] == SESSION and again[-1]["result"] == "3 messages"
    assert again[0]["permissionMode"] == "plan"
    by_run = run_sdk_args(api_server, tmp_path, workspace, "three", resume=again[0]["run_id"])
    assert (by_run[-1]["session_id"], by_run[-1]["result"]) == (SESSION, "5 messages")

    forked = run_sdk_args(
        api_server, tmp_path, workspace, "four", resume=SESSION, fork_session=True
    )
    assert uuid.UUID(forked[-1]["session_id"]) and forked[-1]["session_id"] != SESSION
    assert forked[-1]["result"] == "7 messages"  # the newest run of the session went on
    assert (
        run_sdk_args(api_server, tmp_path, workspace, "five", resume=SESSION)[-1]["result"]
        == "7 messages"
    )  # the fork is a session of its own

    env = cli_env(api_server, HOME=str(tmp_path / "home"))
    for options, error in (
        ({"session_id": SESSION}, f"session id {SESSION} is already in use"),
        ({"session_id": "not-a-uuid"}, "it must be a UUID"),
        ({"session_id": str(uuid.uuid4()), "resume": SESSION}, "only with --fork-session"),
    ):
        done = run_cli(["-p", "x", *sdk_args(**options)], env, cwd=workspace, input="")
        assert done.returncode == 2 and error in done.stderr, done.stderr


def test_a_disconnect_never_starts_a_queued_message(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """The SDK's disconnect() closes stdin, then sends SIGTERM: the run it ends is the
    last; a message queued behind it is not started."""

    def slow(req: Request) -> Reply:
        return text_reply("late", delay=60)

    api_server.handler = slow
    options = ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT),
        cwd=str(workspace),
        env=cli_env(api_server, HOME=str(tmp_path)),
    )

    async def talk() -> None:
        client = claude_agent_sdk.ClaudeSDKClient(options)
        await client.connect()
        await client.query("first")
        while not api_server.requests:  # the first run waits for its answer
            await asyncio.sleep(0.05)
        await client.query("second")  # queued behind it
        await client.disconnect()

    asyncio.run(asyncio.wait_for(talk(), 60))
    assert len(api_server.requests) == 1


def test_allowed_tools_and_tools_apply_to_children_as_to_the_parent(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """Claude Code's subagents have the session's permissions: with ``allowed_tools`` and
    nobody to ask, a child keeps the read-only tools and what the rules name, its bash
    under the same rules."""

    api_server.handler = delegating(
        "git --version; touch made.txt", lambda req: ",".join(sorted(req.tool_names))
    )
    run_sdk_args(api_server, tmp_path, workspace, "go", allowed_tools=["Bash(git:*)", "Edit"])
    child = [r for r in api_server.requests if not r.is_parent]
    assert sorted(child[0].tool_names) == ["Bash", "Edit", "Glob", "Grep", "Read"]
    refused = child[1].tool_results[0]
    assert refused["is_error"] and "`touch made.txt` is not allowed" in refused["content"]
    assert not (workspace / "made.txt").exists()

    api_server.requests.clear()  # the session's tools are a child's too, as in Claude Code
    run_sdk_args(api_server, tmp_path, workspace, "go", tools=["Read", "Bash", "Task"])
    child = [r for r in api_server.requests if not r.is_parent]
    assert child[0].tool_names == ["Bash", "Read"]


def test_interrupt_ends_a_running_child(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """The SDK's interrupt while the parent waits on a child: the child is ended now (its
    command with it), not when it finishes, and the turn ends as an interrupted one."""

    api_server.handler = delegating("touch started; sleep 600", lambda req: "finished")
    options = ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT),
        cwd=str(workspace),
        env=cli_env(api_server, HOME=str(tmp_path)),
    )

    async def talk() -> list[Any]:
        async with claude_agent_sdk.ClaudeSDKClient(options) as client:
            await client.query("go")
            while not (workspace / "started").exists():  # the child's command runs
                await asyncio.sleep(0.05)
            await client.interrupt()
            return [m async for m in client.receive_response()]

    messages = asyncio.run(asyncio.wait_for(talk(), 120))  # the command sleeps 600 s
    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.subtype == "error_during_execution"
    (ended,) = [m for m in messages if getattr(m, "subtype", "") == "task_notification"]
    assert ended.data["status"] == "stopped" and ended.data["result"]["status"] == "cancelled"


def test_stop_task_ends_one_child_and_the_parent_goes_on(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """The SDK's stop_task, as in Claude Code: that subagent ends (stopped), its task call
    says so to the parent's model, and the parent's turn goes on to its answer."""
    api_server.handler = delegating("touch started; sleep 600", lambda req: "answered")
    options = ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT),
        cwd=str(workspace),
        env=cli_env(api_server, HOME=str(tmp_path)),
    )

    async def talk() -> tuple[list[Any], str]:
        async with claude_agent_sdk.ClaudeSDKClient(options) as client:
            await client.query("go")
            messages = []
            async for message in client.receive_messages():
                messages.append(message)
                if getattr(message, "subtype", "") == "task_started":
                    while not (workspace / "started").exists():
                        await asyncio.sleep(0.05)
                    await client.stop_task(message.data["task_id"])
                if isinstance(message, ResultMessage):
                    break
            try:
                await client.stop_task("999")
                refused = ""
            except Exception as exc:
                refused = str(exc)
            return messages, refused

    messages, refused = asyncio.run(asyncio.wait_for(talk(), 120))
    (ended,) = [m for m in messages if getattr(m, "subtype", "") == "task_notification"]
    assert ended.data["status"] == "stopped" and "stopped (stop_task)" in ended.data[
        "summary"
    ] + str(ended.data["result"])
    result = messages[-1]
    assert isinstance(result, ResultMessage) and (result.is_error, result.result) == (
        False,
        "answered",
    )
    parent_saw = [r for r in api_server.requests if r.is_parent][-1].tool_results[0]
    assert parent_saw["is_error"] and "cancelled" in str(parent_saw["content"])
    assert refused == "no task '999' is running"


def test_the_session_goes_on_after_an_interrupt_with_the_interrupted_turn_in_it(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """As in Claude Code: the message after an interrupt continues the same session, and its
    request carries the first prompt and the interrupted task call, answered as such."""
    api_server.handler = delegating("touch started; sleep 600", lambda req: "answered")
    options = ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT),
        cwd=str(workspace),
        env=cli_env(api_server, HOME=str(tmp_path)),
    )

    async def talk() -> list[ResultMessage]:
        async with claude_agent_sdk.ClaudeSDKClient(options) as client:
            await client.query("go")
            while not (workspace / "started").exists():
                await asyncio.sleep(0.05)
            await client.interrupt()
            results = [m async for m in client.receive_response() if isinstance(m, ResultMessage)]
            await client.query("after")
            results += [m async for m in client.receive_response() if isinstance(m, ResultMessage)]
            return results

    interrupted, after = asyncio.run(asyncio.wait_for(talk(), 120))
    assert interrupted.is_error and (after.is_error, after.result) == (False, "answered")
    assert after.session_id == interrupted.session_id
    last = [r for r in api_server.requests if r.is_parent][-1]
    assert last.first_user_text == "go" and "after" in last.text()
    assert INTERRUPTED in last.text() and last.messages[1]["content"][0]["name"] == "Agent"


def test_can_use_tool_is_asked_about_the_parents_calls(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """``can_use_tool`` (``--permission-prompt-tool stdio``): each parent call that needs a
    yes is asked, under Claude Code's tool name; the answer may change its input or refuse
    it with a message the model reads. Reads, and what ``allowed_tools`` names, are not
    asked about."""
    calls = [
        ("Bash", {"command": "echo asked"}),
        ("Bash", {"command": "echo free"}),  # Bash(echo free) is allowed
        ("Write", {"file_path": "made.txt", "content": "x"}),
        ("Grep", {"pattern": "x"}),
    ]

    def handler(req: Request) -> Reply:
        if req.turn == 0:
            return tools_reply(calls)
        return text_reply(json.dumps([r["content"] for r in req.tool_results]))

    api_server.handler = handler
    asked: list[tuple[str, dict[str, Any]]] = []

    async def can_use_tool(name: str, tool_input: dict[str, Any], _context: Any) -> Any:
        asked.append((name, tool_input))
        if name == "Bash":
            return claude_agent_sdk.PermissionResultAllow(updated_input={"command": "echo changed"})
        return claude_agent_sdk.PermissionResultDeny(message="no writing today")

    options = ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT),
        cwd=str(workspace),
        env=cli_env(api_server, HOME=str(tmp_path)),
        can_use_tool=can_use_tool,
        allowed_tools=["Bash(echo free)"],
    )

    async def talk() -> list[Any]:
        async with claude_agent_sdk.ClaudeSDKClient(options) as client:
            await client.query("go")
            return [m async for m in client.receive_response()]

    messages = asyncio.run(asyncio.wait_for(talk(), 60))
    assert asked == [("Bash", {"command": "echo asked"}), ("Write", calls[2][1])]
    bash, free, write, _ = json.loads(messages[-1].result)
    assert (bash, free) == ("changed\n", "free\n")
    assert write == "Permission to use Write denied: no writing today"
    assert not (workspace / "made.txt").exists()
    assert "Write" in messages[0].data["tools"]  # someone can be asked: every tool
    [denial] = messages[-1].permission_denials  # as Claude Code reports it
    assert (denial["tool_name"], denial["tool_input"]) == ("Write", calls[2][1])

    env = cli_env(api_server, HOME=str(tmp_path))
    for args, error in (
        (sdk_args(permission_prompt_tool_name="mcp__perm__ask"), "is not supported: isoagent"),
        (["--permission-prompt-tool", "stdio"], "needs --input-format stream-json"),
    ):
        done = run_cli(["-p", "x", *args], env, cwd=workspace, input="")
        assert done.returncode == 1 and error in done.stderr, done.stderr


def test_settings_apply_permissions_and_model_and_refuse_the_rest(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """``settings`` (JSON or a file): permissions and model are applied as Claude Code
    applies them; a hook event isoagent never fires, a sandbox setting isoagent's sandbox
    lacks, env are refused by name."""
    api_server.handler = lambda req: text_reply(",".join(req.tool_names))
    settings = {
        "permissions": {"allow": ["Bash(git:*)"], "deny": ["Edit"], "defaultMode": "plan"},
        "model": "haiku",
        "statusLine": {"type": "command", "command": "x"},  # Claude Code's screen only
    }
    lines = run_sdk_args(api_server, tmp_path, workspace, "hi", settings=json.dumps(settings))
    assert lines[0]["permissionMode"] == "plan" and lines[0]["model"] == CURRENT_MODELS["haiku"]
    assert lines[-1]["result"] == "Read,Glob,Grep,Agent,SendMessage"  # plan takes git's Bash too

    file = tmp_path / "settings.json"
    file.write_text(json.dumps({"permissions": {"allow": ["Bash(git:*)"], "deny": ["Edit"]}}))
    lines = run_sdk_args(
        api_server, tmp_path, workspace, "hi", settings=str(file), model="sonnet",
        sandbox={"enabled": False},
    )  # fmt: skip
    assert lines[0]["model"] == CURRENT_MODELS["sonnet"]  # --model wins over the settings
    assert lines[-1]["result"] == "Read,Glob,Grep,Bash,Agent,SendMessage"

    env = cli_env(api_server, HOME=str(tmp_path))
    for options, error in (
        ({"settings": '{"hooks": {"Notification": []}}'}, "'hooks.Notification': isoagent runs"),
        (
            {"sandbox": {"enabled": True, "excludedCommands": ["docker"]}},
            "'sandbox.excludedCommands': isoagent does not apply",
        ),
        ({"settings": '{"env": {"A": "1"}}'}, "'env': isoagent takes its environment"),
        ({"settings": '{"permissions": {"mode": 1}}'}, "'permissions.mode': isoagent does not"),
    ):
        done = run_cli(["-p", "x", *sdk_args(**options)], env, cwd=workspace, input="")
        assert done.returncode == 1, done.stderr
        assert done.stderr.startswith("isoagent: error: --settings is not supported: " + error)


def test_an_agents_effort_reaches_its_childs_requests_and_no_other_option_does(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """An agent's ``effort`` (``AgentDefinition(effort=...)``, ``--agents``, front matter):
    Claude Code applies it to the subagent's requests."""

    def handler(req: Request) -> Reply:
        if req.is_parent and req.turn == 0:
            return tool_reply(
                "Agent", {"description": "d", "prompt": "p", "subagent_type": "eager"}
            )
        return text_reply("done")

    api_server.handler = handler
    eager = {"eager": {"description": "E.", "prompt": "Try hard.", "effort": "max"}}
    args = ["-p", "hi", "--agents", json.dumps(eager), "--effort", "low"]
    done = run_cli(args, cli_env(api_server, HOME=str(tmp_path)), cwd=workspace, input="")
    assert done.returncode == 0, done.stderr
    parent = api_server.requests[0]
    (child,) = [r for r in api_server.requests if not r.is_parent]
    assert (parent.body["output_config"], child.body["output_config"]) == (
        {"effort": "low"},
        {"effort": "max"},
    )


def test_effort_thinking_task_budget_and_betas_reach_the_parents_requests(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """As Claude Code sends them: output_config's effort and task_budget (with its beta),
    the thinking config, the anthropic-beta header; a child's calls carry none of them."""
    api_server.handler = delegating("true", lambda req: "done")
    run_sdk_args(
        api_server, tmp_path, workspace, "hi", effort="high", task_budget={"total": 50000},
        thinking={"type": "adaptive", "display": "summarized"}, betas=["context-1m-2025-08-07"],
    )  # fmt: skip
    parent, child = api_server.requests[0], next(r for r in api_server.requests if not r.is_parent)
    assert parent.body["output_config"] == {
        "effort": "high", "task_budget": {"type": "tokens", "total": 50000},
    }  # fmt: skip
    assert parent.body["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert parent.headers["anthropic-beta"] == "context-1m-2025-08-07,task-budgets-2026-03-13"
    assert "output_config" not in child.body and "anthropic-beta" not in child.headers

    api_server.requests.clear()
    run_sdk_args(api_server, tmp_path, workspace, "hi", max_thinking_tokens=2000)
    assert api_server.requests[0].body["thinking"] == {"type": "enabled", "budget_tokens": 2000}
    api_server.requests.clear()
    run_sdk_args(api_server, tmp_path, workspace, "hi", thinking={"type": "disabled"})
    assert "thinking" not in api_server.requests[0].body

    env = cli_env(api_server, HOME=str(tmp_path))
    big = run_cli(["-p", "x", "--max-thinking-tokens", "99999"], env, cwd=workspace, input="")
    assert big.returncode == 2 and "must be below the parent's max_tokens" in big.stderr


def test_a_plugins_agents_are_offered_as_claude_code_names_them(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """``plugins=[{"type": "local"}]``: the plugin's agents as ``plugin:agent``; a plugin
    with hooks (or MCP servers, commands, skills) is refused, not half loaded."""
    plugin = tmp_path / "plug"
    (plugin / ".claude-plugin").mkdir(parents=True)
    (plugin / ".claude-plugin" / "plugin.json").write_text('{"name": "myplug"}')
    (plugin / "agents").mkdir()
    (plugin / "agents" / "helper.md").write_text("---\nname: helper\ndescription: d\n---\np\n")
    lines = run_sdk_args(
        api_server, tmp_path, workspace, "hi", plugins=[{"type": "local", "path": str(plugin)}]
    )
    assert "myplug:helper" in lines[0]["agents"]
    assert lines[0]["plugins"] == [
        {"name": "myplug", "path": str(plugin), "source": "myplug@inline"}
    ]  # as Claude Code's init lists it

    (plugin / "hooks").mkdir()
    (plugin / "hooks" / "hooks.json").write_text("{}")
    env = cli_env(api_server, HOME=str(tmp_path))
    args = sdk_args(plugins=[{"type": "local", "path": str(plugin)}])
    done = run_cli(["-p", "x", *args], env, cwd=workspace, input="")
    assert done.returncode == 1
    assert done.stderr.startswith(
        "isoagent: error: --plugin-dir is not supported: plugin 'myplug' has hooks: isoagent "
        "does not load"
    )


def test_set_model_and_permission_mode_between_messages_and_skills_refused(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """``ClaudeSDKClient.set_model`` and ``set_permission_mode`` set the next message's run
    (also when sent as the last run ends); a mode that would widen the session back out of
    plan is refused; ``skills`` (isoagent has none) are refused at initialize."""
    api_server.handler = lambda req: text_reply(f"{req.model} {','.join(req.tool_names)}")
    env = cli_env(api_server, HOME=str(tmp_path))
    options = ClaudeAgentOptions(cli_path=str(ISOAGENT_SCRIPT), cwd=str(workspace), env=env)

    async def talk() -> tuple[list[str], str]:
        answers = []
        async with claude_agent_sdk.ClaudeSDKClient(options) as client:
            for model, mode in (("haiku", "default"), ("opus", "plan")):
                await client.set_model(model)
                await client.set_permission_mode(mode)
                await client.query("which")
                async for message in client.receive_response():
                    if isinstance(message, ResultMessage):
                        answers.append(message.result or "")
            try:
                await client.set_permission_mode("default")
                refusal = ""
            except Exception as exc:
                refusal = str(exc)
        return answers, refusal

    answers, refusal = asyncio.run(asyncio.wait_for(talk(), 60))
    assert answers == [
        f"{CURRENT_MODELS['haiku']} Bash,Read,Write,Edit,Glob,Grep,Agent,SendMessage",
        f"{CURRENT_MODELS['opus']} Read,Glob,Grep,Agent,SendMessage",
    ]
    assert "cannot widen a session from plan to default" in refusal

    skilled = ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT), cwd=str(workspace), env=env, skills=["pdf"]
    )

    async def ask() -> None:
        async for _ in claude_agent_sdk.query(prompt="hi", options=skilled):
            pass

    with pytest.raises(Exception, match="skills is not supported: isoagent has no skills"):
        asyncio.run(asyncio.wait_for(ask(), 60))


@needs_claude
def test_json_schema_and_budget_end_as_claude_codes_on_the_same_server(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """Side by side with Claude Code's own CLI: the same structured_output and result for
    --json-schema, the same subtype, terminal_reason and turns when --max-budget-usd runs out."""

    def answer(req: Request) -> Reply:
        if "StructuredOutput" in req.tool_names and req.turn == 0:
            return tool_reply("StructuredOutput", {"answer": 42})
        if "StructuredOutput" not in req.tool_names:
            return tool_reply("Bash", {"command": "echo step", "description": "step"})
        return text_reply("done")

    api_server.handler = answer
    args = ["-p", "q", "--output-format", "json", "--model", "sonnet"]
    claude, isoagent = (
        json.loads(out)
        for out in run_both([*args, "--json-schema", json.dumps(SCHEMA)], api_server, tmp_path)
    )
    for key in ("subtype", "is_error", "result", "structured_output", "num_turns"):
        assert isoagent[key] == claude[key], key

    budget = [*args, "--max-budget-usd", "0.0002", "--allowedTools", "Bash"]
    claude, isoagent = (
        json.loads(out) for out in run_both(budget, api_server, tmp_path / "budget", ok=False)
    )
    for key in ("subtype", "is_error", "terminal_reason", "num_turns"):
        assert isoagent[key] == claude[key], key


def test_the_python_api_takes_the_same_options(
    api_server: MessagesServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workspace: Path
) -> None:
    """``isoagent.run`` with the Options these flags become: the structured answer and the
    session id come back; a resume goes on in the same session."""
    for name, value in cli_env(api_server, HOME=str(tmp_path)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ISOAGENT_WARM_GATEWAY", "0")

    def answer(req: Request) -> Reply:
        if not req.tool_results:  # a prompt: answer it through the tool
            return tool_reply("StructuredOutput", {"answer": len(req.messages)})
        return text_reply("done")

    api_server.handler = answer
    options = isoagent.Options(workdir=workspace, json_schema=SCHEMA, session_id=SESSION)
    first = isoagent.run("one", options=options)
    assert (first.structured_output, first.result, first.session_id) == (
        {"answer": 1}, '{"answer":1}', SESSION,
    )  # fmt: skip
    again = isoagent.run("two", options=options.replace(session_id=None, resume=SESSION))
    assert again.session_id == SESSION and again.structured_output == {"answer": 5}


def test_the_sdks_agents_are_under_the_sessions_permissions(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """An agent type sent in ``initialize`` gets no more than the session allows: in plan
    mode its child has no writing tool (and a read-only sandbox), whatever its own tools say."""
    api_server.handler = lambda req: (
        tool_reply("Agent", {"description": "d", "prompt": "p", "subagent_type": "w"})
        if req.is_parent and req.turn == 0
        else text_reply(",".join(req.tool_names))
    )
    options = ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT),
        cwd=str(workspace),
        env=cli_env(api_server, HOME=str(tmp_path)),
        permission_mode="plan",
        agents={"w": claude_agent_sdk.AgentDefinition(description="d", prompt="p", tools=[
            "Read", "Write", "Bash"])},
    )  # fmt: skip

    async def ask() -> list[Any]:
        return [m async for m in claude_agent_sdk.query(prompt="go", options=options)]

    asyncio.run(asyncio.wait_for(ask(), 60))
    child = next(r for r in api_server.requests if not r.is_parent)
    assert child.tool_names == ["Read", "Bash"]  # no Write; Bash in a read-only sandbox
