"""Prompt caching: every request carries cache breakpoints where a conversation's next turn
reads them back, and the cache's token counts reach the JSON output and the transcripts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from isoagent.parent.model.sdk import AnthropicSource
from isoagent.protocol import Message, ModelCall, TextBlock, ThinkingBlock, ToolSpec, Usage
from tests.conftest import cli_env
from tests.support.cli import read_jsonl, run_cli, run_dirs
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply

EPHEMERAL = {"type": "ephemeral"}


def breakpoints(body: dict[str, Any]) -> list[str]:
    """Where a request body carries ``cache_control``, as paths: ``tools[2]``,
    ``system[0]``, ``messages[3].content[1]``."""
    marked = "cache_control"
    found = [f"tools[{i}]" for i, tool in enumerate(body.get("tools", [])) if marked in tool]
    system = body.get("system", [])
    found += [f"system[{i}]" for i, b in enumerate(system) if isinstance(b, dict) and marked in b]
    for m, message in enumerate(body["messages"]):
        content = message["content"]
        found += [
            f"messages[{m}].content[{b}]"
            for b, block in enumerate(content if isinstance(content, list) else [])
            if "cache_control" in block
        ]
    return found


def test_each_turn_of_a_child_marks_its_tools_system_and_newest_block_for_the_cache(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    def handler(req: Request) -> Reply:
        if req.turn < 2:
            return tool_reply("Bash", {"command": f"echo {req.turn}"})
        return text_reply("done")

    api_server.handler = handler
    done = run_cli(["task", "count"], cli_env(api_server, HOME=str(tmp_path)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [r.turn for r in api_server.requests] == [0, 1, 2]
    for request in api_server.requests:
        body = request.body
        last = len(body["messages"]) - 1
        newest = f"messages[{last}].content[{len(body['messages'][last]['content']) - 1}]"
        tools = f"tools[{len(body['tools']) - 1}]"
        # the API allows 4; an older turn's breakpoint left in place would be a 4th and a 5th
        assert breakpoints(body) == [tools, "system[0]", newest]
        assert body["system"][0]["cache_control"] == EPHEMERAL
    # each turn's messages are the turn before's, the reply and the tool results after them:
    # the prefix up to the earlier breakpoint is the same, so the cache can serve it
    earlier, later = (_unmarked(r.body["messages"]) for r in api_server.requests[1:])
    assert later[: len(earlier)] == earlier


def _unmarked(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    return [
        [{k: v for k, v in block.items() if k != "cache_control"} for block in m["content"]]
        for m in messages
    ]


def test_the_breakpoint_skips_thinking_blocks_and_empty_text(
    api_server: MessagesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api_server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    source = AnthropicSource(max_retries=0)
    content = [TextBlock("answer"), ThinkingBlock("hmm", "sig"), TextBlock("")]
    messages = [Message("user", [TextBlock("q")]), Message("assistant", content)]
    call = ModelCall(1, "m", 100, "", messages)
    reply = asyncio.run(source.complete(call))
    assert reply.error is None
    body = api_server.requests[0].body
    assert breakpoints(body) == ["messages[1].content[0]"]  # no tools and no system: one mark
    assert "system" not in body and "tools" not in body


def test_cache_token_counts_reach_the_json_output_and_the_transcripts(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    def handler(req: Request) -> Reply:
        if req.turn == 0:  # the first turn writes the prefix, the second reads it
            return Reply(**{**vars(tool_reply("Bash", {"command": "true"})), "cache": (900, 0)})
        return Reply(**{**vars(text_reply("done")), "cache": (40, 900)})

    api_server.handler = handler
    done = run_cli(
        ["task", "go", "--output-format", "json"],
        cli_env(api_server, HOME=str(tmp_path)),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    usage = json.loads(done.stdout)["usage"]  # Claude Code's result object
    assert usage == {
        "input_tokens": 20,
        "output_tokens": 10,
        "cache_creation_input_tokens": 940,
        "cache_read_input_tokens": 900,
    }
    (run,) = run_dirs(tmp_path)
    (transcript,) = run.glob("child-*.jsonl")
    replies = [
        e["usage"] for e in read_jsonl(transcript) if e["type"] == "message" and e.get("usage")
    ]
    assert [(u["cache_creation_input_tokens"], u["cache_read_input_tokens"]) for u in replies] == [
        (900, 0),
        (40, 900),
    ]


def test_a_server_that_sends_null_cache_counts_is_read_as_zero(
    api_server: MessagesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api_server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    api_server.handler = lambda req: Reply(
        content=[{"type": "text", "text": "hi"}],
        usage=(3, 4),
        cache=(None, None),  # type: ignore[arg-type]
    )
    tools = [ToolSpec("t", "d", {})]
    call = ModelCall(0, "m", 100, "sys", [Message("user", [TextBlock("q")])], tools)
    reply = asyncio.run(AnthropicSource(max_retries=0).complete(call))
    assert reply.error is None and reply.usage == Usage(3, 4, 0, 0)
    assert reply.usage.total == 7
