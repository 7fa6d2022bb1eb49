"""Every model call is streamed: the message is built from the API's events, and an answer
that breaks off (a cut connection, an ``error`` event in its midst) is asked for again from
the start, with nothing of the broken half kept and its usage counted once."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import claude_agent_sdk
import pytest
from claude_agent_sdk import AssistantMessage, ClaudeAgentOptions, ResultMessage, StreamEvent
from claude_agent_sdk import ToolUseBlock as SdkToolUse
from claude_agent_sdk._internal.message_parser import parse_message

from isoagent.parent.model.retry import RetryingSource
from isoagent.parent.model.sdk import AnthropicSource
from isoagent.parent.model.stream import Assembly, EventSplitter, decode, listener
from isoagent.protocol import Message, ModelCall, ModelReply, TextBlock, ToolUseBlock
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, text_reply, tool_reply
from tests.test_print_mode import needs_claude, run_both

CALL = ModelCall(0, "m", 100, "sys", [Message("user", [TextBlock("hi")])])
ANSWER = "The whole answer, long enough to come in many events. " * 4


@pytest.fixture
def source(api_server: MessagesServer, monkeypatch: pytest.MonkeyPatch) -> RetryingSource:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api_server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    return RetryingSource(AnthropicSource())


def _run(source: RetryingSource) -> ModelReply:
    async def go() -> ModelReply:
        try:
            return await source.complete(CALL)
        finally:
            await source.aclose()

    return asyncio.run(go())


def test_every_call_is_streamed_and_the_message_is_built_from_its_events(
    api_server: MessagesServer, source: RetryingSource
) -> None:
    api_server.handler = lambda req: tool_reply(
        "Bash", {"command": "echo " + "x" * 40}, id="toolu_1", text=ANSWER, usage=(7, 3)
    )
    reply = _run(source)
    assert [r.stream for r in api_server.requests] == [True]
    assert reply.content == [
        TextBlock(ANSWER),
        ToolUseBlock("toolu_1", "Bash", {"command": "echo " + "x" * 40}),
    ]
    assert (reply.stop_reason, reply.usage.input_tokens, reply.usage.output_tokens) == (
        "tool_use",
        7,
        3,
    )


@pytest.mark.parametrize(
    "broken",
    [{"cut_after": 5}, {"fail_after": 5}, {"cut_after": 0}],
    ids=["connection cut", "overloaded_error event", "cut before any event"],
)
def test_an_answer_that_breaks_off_is_asked_again_and_only_the_whole_one_is_kept(
    api_server: MessagesServer, source: RetryingSource, broken: dict[str, int]
) -> None:
    whole = text_reply(ANSWER, usage=(7, 3))
    cut = replace(whole, **broken)  # type: ignore[arg-type]
    api_server.handler = lambda req: [cut, cut, whole]
    reply = _run(source)
    assert reply.error is None, reply.error
    assert reply.content == [TextBlock(ANSWER)]
    assert reply.retries == 2
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (7, 3)
    assert len(api_server.requests) == 3


def test_a_server_that_answers_a_stream_with_one_message_is_understood(
    api_server: MessagesServer, source: RetryingSource
) -> None:
    api_server.handler = lambda req: replace(text_reply("plain"), streams=False)
    reply = _run(source)
    assert (reply.error, reply.content) == (None, [TextBlock("plain")])


def test_a_task_whose_first_two_streams_are_cut_prints_its_whole_answer_once(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    whole = text_reply(ANSWER)
    cut = replace(whole, cut_after=6)
    api_server.handler = lambda req: [cut, cut, whole]
    done = run_cli(["task", "say it"], cli_env(api_server), cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ANSWER.strip()
    assert len(api_server.requests) == 3


def test_only_events_that_are_json_are_heard_and_each_on_one_line(
    api_server: MessagesServer, source: RetryingSource
) -> None:
    """A stream_event line embeds the event's JSON as sent: garbage would break the reader's
    stream, and an event sent over two ``data:`` lines would break its lines."""
    start = b'data: {"type":"message_start","message":{"usage":{"input_tokens":1}}}\n\n'
    split = b'data: {"type":"ping",\ndata: "extra":1}\n\n'
    api_server.handler = lambda req: Reply(sse=start + split + b'data: {"type":"ping"}}x\n\n')
    heard: list[bytes] = []

    async def go() -> ModelReply:
        listener.set(heard.append)
        try:
            return await source.source.complete(CALL)
        finally:
            await source.aclose()

    reply = asyncio.run(go())
    assert reply.error is not None and reply.error.kind == "api"
    assert [json.loads(line) for line in heard] == [
        {"type": "message_start", "message": {"usage": {"input_tokens": 1}}},
        {"type": "ping", "extra": 1},
    ]
    assert not [line for line in heard if b"\n" in line]


def test_events_of_kinds_added_since_are_skipped_and_line_ends_may_be_crlf() -> None:
    body = (
        b'event: message_start\r\ndata: {"type":"message_start","message":{"usage":'
        b'{"input_tokens":4,"output_tokens":1}}}\r\n\r\n'
        b'event: content_block_start\r\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"text","text":""}}\r\n\r\n'
        b'event: content_block_delta\r\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"citations_delta","citation":{}}}\r\n\r\n'
        b'event: brand_new\r\ndata: {"type":"brand_new"}\r\n\r\n'
        b": a comment\r\n\r\n"
        b'data: {"type":"content_block_delta","index":0,\r\n'
        b'data: "delta":{"type":"text_delta","text":"hello"}}\r\n\r\n'
        b'data: {"type":"content_block_stop","index":0}\r\n\r\n'
        b'data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
        b'"usage":{"output_tokens":2}}\r\n\r\n'
    )
    splitter, assembly = EventSplitter(), Assembly(3)
    for at in range(0, len(body), 7):  # chunks that split lines, and CRLFs, anywhere
        for data in splitter.feed(body[at : at + 7]):
            assembly.add(decode(data))
    assert assembly.whole
    reply = assembly.reply()
    assert (reply.turn, reply.content, reply.stop_reason) == (3, [TextBlock("hello")], "end_turn")
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (4, 2)


# -- --include-partial-messages: the events, as Claude Code's stream_event lines -------------


def delegating(req: Request) -> Reply:
    """The parent hands one task to an Explore child, then answers."""
    if req.is_parent and req.turn == 0:
        task = {"description": "look", "prompt": "list files", "subagent_type": "Explore"}
        return tool_reply("Agent", task, text="Delegating.")
    return text_reply("child's answer" if not req.is_parent else ANSWER)


def _messages(stdout: str) -> list[Any]:
    return [parse_message(json.loads(line)) for line in stdout.splitlines()]


def _text(events: list[StreamEvent]) -> str:
    return "".join(
        e.event["delta"]["text"]
        for e in events
        if e.event["type"] == "content_block_delta" and e.event["delta"]["type"] == "text_delta"
    )


def test_partial_messages_are_stream_events_with_each_child_s_task_call(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = delegating
    args = ["run", "--output-format", "stream-json", "--include-partial-messages", "go"]
    done = run_cli(args, cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    messages = _messages(done.stdout)
    events = [m for m in messages if isinstance(m, StreamEvent)]
    (task_call,) = [
        b for m in messages if isinstance(m, AssistantMessage) for b in m.content
        if isinstance(b, SdkToolUse)
    ]  # fmt: skip
    parents = [e for e in events if e.parent_tool_use_id is None]
    childs = [e for e in events if e.parent_tool_use_id == task_call.id]
    assert len(parents) + len(childs) == len(events)
    assert _text(parents) == "Delegating." + ANSWER  # the parent's two calls
    assert _text(childs) == "child's answer"
    assert [e.event["type"] for e in childs][0 :: len(childs) - 1] == [
        "message_start",
        "message_stop",
    ]
    session = messages[0].data["session_id"]
    assert {e.session_id for e in events} == {session}


def test_each_message_has_its_streams_id_and_the_result_the_stop_reason(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """As in Claude Code: an assistant message's id is its stream's message_start id (a UI
    merges partial events with the final message by it); the result says why it ended."""
    api_server.handler = delegating
    args = ["run", "--output-format", "stream-json", "--include-partial-messages", "go"]
    done = run_cli(args, cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    messages = _messages(done.stdout)
    started = [
        m.event["message"]["id"]
        for m in messages
        if isinstance(m, StreamEvent) and m.event["type"] == "message_start"
    ]
    answered = [m.message_id for m in messages if isinstance(m, AssistantMessage)]
    assert len(answered) == 3 and sorted(answered) == sorted(started)  # parent 2, child 1
    assert messages[-1].stop_reason == "end_turn"


def test_print_mode_prints_partial_messages_too(api_server: MessagesServer, tmp_path: Path) -> None:
    api_server.handler = lambda req: text_reply(ANSWER)
    args = ["-p", "--output-format", "stream-json", "--include-partial-messages", "go"]
    done = run_cli(args, cli_env(api_server), cwd=tmp_path, input="")
    assert done.returncode == 0, done.stderr
    assert _text([m for m in _messages(done.stdout) if isinstance(m, StreamEvent)]) == ANSWER


def test_without_the_flag_no_stream_event_is_printed(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = delegating
    done = run_cli(
        ["run", "--output-format", "stream-json", "go"], cli_env(api_server), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert not [m for m in _messages(done.stdout) if isinstance(m, StreamEvent)]


def test_partial_messages_need_stream_json(api_server: MessagesServer, tmp_path: Path) -> None:
    done = run_cli(["task", "--include-partial-messages", "go"], cli_env(api_server), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "isoagent: error: --include-partial-messages needs --output-format stream-json"
    ]
    assert not api_server.requests


def test_the_sdk_with_include_partial_messages_yields_stream_events(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    api_server.handler = lambda req: text_reply(ANSWER)
    options = ClaudeAgentOptions(
        cli_path=str(Path(sys.executable).with_name("isoagent")),
        cwd=str(tmp_path),
        env=cli_env(api_server, HOME=str(tmp_path)),
        include_partial_messages=True,
    )

    async def collect() -> list[Any]:
        return [m async for m in claude_agent_sdk.query(prompt="go", options=options)]

    messages = asyncio.run(collect())
    events = [m for m in messages if isinstance(m, StreamEvent)]
    assert _text(events) == ANSWER
    assert all(e.parent_tool_use_id is None for e in events)
    assert isinstance(messages[-1], ResultMessage) and messages[-1].result == ANSWER.strip()


@needs_claude
def test_ids_stop_reason_and_session_id_are_as_claude_codes(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """Both CLIs on the same server: each assistant message carries its stream's
    message_start id, the result says end_turn, the session id is a UUID."""
    api_server.handler = lambda req: text_reply(ANSWER)
    args = ["-p", "go", "--output-format", "stream-json", "--verbose"]
    for stdout in run_both([*args, "--include-partial-messages"], api_server, tmp_path):
        messages = _messages(stdout)
        started = [
            m.event["message"]["id"]
            for m in messages
            if isinstance(m, StreamEvent) and m.event["type"] == "message_start"
        ]
        answered = {m.message_id for m in messages if isinstance(m, AssistantMessage)}
        assert answered == set(started) and len(started) == 1
        result = messages[-1]
        assert isinstance(result, ResultMessage) and result.stop_reason == "end_turn"
        assert uuid.UUID(result.session_id)
