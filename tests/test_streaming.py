"""Every model call is streamed: the message is built from the API's events, and an answer
that breaks off (a cut connection, an ``error`` event in its midst) is asked for again from
the start, with nothing of the broken half kept and its usage counted once."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from isoagent.parent.model.retry import RetryingSource
from isoagent.parent.model.sdk import AnthropicSource
from isoagent.parent.model.stream import Assembly, EventSplitter, decode
from isoagent.protocol import Message, ModelCall, ModelReply, TextBlock, ToolUseBlock
from tests.conftest import cli_env
from tests.support.cli import run_cli
from tests.support.messages_server import MessagesServer, text_reply, tool_reply

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
        "bash", {"command": "echo " + "x" * 40}, id="toolu_1", text=ANSWER, usage=(7, 3)
    )
    reply = _run(source)
    assert [r.stream for r in api_server.requests] == [True]
    assert reply.content == [
        TextBlock(ANSWER),
        ToolUseBlock("toolu_1", "bash", {"command": "echo " + "x" * 40}),
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
