"""The claude-agent-sdk's options against isoagent: each flag the SDK sends works as in Claude
Code or is refused by name, never click's exit 2 on an unknown option.

Most tests run the exact command line the SDK builds for an option (its own
``SubprocessCLITransport``) in-process, with the prompt as ``-p``; those about the control
protocol run the SDK itself with ``cli_path`` = isoagent."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import claude_agent_sdk
import pytest
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage
from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport

from isoagent.parent.cli.sdk_options import REFUSED
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Request, text_reply

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
    "--max-budget-usd": {"max_budget_usd": 1.0},
    "--json-schema": {"output_format": {"type": "json_schema", "schema": {"type": "object"}}},
    "--fallback-model": {"fallback_model": "haiku"},
    "--task-budget": {"task_budget": {"total": 1000}},
    "--betas": {"betas": ["context-1m-2025-08-07"]},
    "--permission-prompt-tool": {"permission_prompt_tool_name": "stdio"},
    "--session-id": {"session_id": "11111111-2222-3333-4444-555555555555"},
    "--fork-session": {"fork_session": True},
    "--resume-session-at": {"resume_session_at": "u1"},
    "--resume-drops-turn": {"resume_drops_turn": "u1"},
    "--session-mirror": {"session_store": object()},
    "--settings": {"settings": '{"permissions": {}}'},
    "--plugin-dir": {"plugins": [{"type": "local", "path": "/nowhere"}]},
    "--thinking": {"thinking": {"type": "adaptive"}},
    "--thinking-display": {"thinking": {"type": "adaptive", "display": "summarized"}},
    "--max-thinking-tokens": {"max_thinking_tokens": 2000},
    "--effort": {"effort": "high"},
}


@pytest.mark.parametrize("flag", sorted(REFUSED))
def test_an_sdk_option_isoagent_cannot_honour_is_refused_by_name(
    flag: str, api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    args = sdk_args(**REFUSED_OPTIONS[flag])
    assert flag in " ".join(args).replace("=", " ").split()
    flag = "--thinking" if flag == "--thinking-display" else flag  # sent with it, named first
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
        betas=["context-1m-2025-08-07"],
    )

    async def ask() -> None:
        async for _ in claude_agent_sdk.query(prompt="hi", options=options):
            pass

    with pytest.raises(Exception, match="--betas is not supported: isoagent sends no beta"):
        asyncio.run(asyncio.wait_for(ask(), 60))
    assert api_server.requests == []


def test_tools_sets_the_parents_base_tools(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """The SDK's ``tools``: the set the parent has (``task`` only if named), ``[]`` none;
    ``allowed_tools`` chooses among them."""
    api_server.handler = lambda req: text_reply(",".join(req.tool_names) or "none")
    cases = [
        ({"tools": ["Bash", "Read"]}, "bash,read_file"),
        ({"tools": ["Read", "Grep", "Task"]}, "read_file,grep,task"),
        ({"tools": []}, "none"),
        ({"tools": {"type": "preset", "preset": "claude_code"}}, "bash,read_file,write_file,"
         "edit_file,glob,grep,task"),
        ({"tools": ["Read", "Write", "Bash"], "allowed_tools": ["Write"]}, "read_file,write_file"),
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


def first_user(req: Request) -> str:
    return req.first_user_text


def test_the_sdks_client_gets_its_result_with_sdk_flags(
    api_server: MessagesServer, tmp_path: Path, workspace: Path
) -> None:
    """One real SDK session with the options that work: the process boundary and the
    control protocol, once."""
    api_server.handler = lambda req: text_reply(",".join(req.tool_names))
    options = ClaudeAgentOptions(
        cli_path=str(ISOAGENT_SCRIPT),
        cwd=str(workspace),
        env=cli_env(api_server, HOME=str(tmp_path)),
        tools=["Read", "Glob"],
        setting_sources=["project"],
        include_hook_events=True,
    )

    async def ask() -> list[Any]:
        return [m async for m in claude_agent_sdk.query(prompt="hi", options=options)]

    messages = asyncio.run(asyncio.wait_for(ask(), 60))
    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.result == "read_file,glob"
