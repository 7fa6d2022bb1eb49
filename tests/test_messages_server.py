"""The in-test Messages API server, exercised through the real anthropic SDK."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

import anthropic
import pytest
from anthropic.types import TextBlock, ToolUseBlock

from tests.support.messages_server import (
    MessagesServer,
    Request,
    error_reply,
    text_reply,
    tool_reply,
    tools_reply,
    unused_url,
)

MODEL = "claude-test-model"
USER = [{"role": "user", "content": "hello"}]


def _client(server: MessagesServer, **kw: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="test-key", **kw)


def _aclient(server: MessagesServer, **kw: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.base_url, api_key="test-key", **kw)


def _dump(blocks: list[Any]) -> list[dict[str, Any]]:
    """Content blocks as dicts without tool-use ids (ids differ per response)."""
    out = []
    for b in blocks:
        d = b.model_dump(exclude_none=True)
        d.pop("id", None)
        out.append(d)
    return out


def test_text_reply_round_trips_and_request_is_recorded(api_server: MessagesServer) -> None:
    api_server.handler = lambda req: text_reply("hi there", usage=(7, 3))
    with _client(api_server) as client:
        msg = client.messages.create(model=MODEL, max_tokens=100, system="be brief", messages=USER)
    assert msg.id.startswith("msg_")
    assert msg.model == MODEL
    assert msg.role == "assistant"
    assert msg.stop_reason == "end_turn"
    assert msg.content == [TextBlock(type="text", text="hi there")]
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (7, 3)
    [req] = api_server.requests
    assert req.system == "be brief"
    assert req.first_user_text == "hello"
    assert req.turn == 0
    assert req.api_key == "test-key"
    assert not req.is_parent


def test_tool_reply_parses_into_tool_use_block(api_server: MessagesServer) -> None:
    api_server.handler = lambda req: tool_reply("Read", {"file_path": "a.txt"}, text="reading")
    with _client(api_server) as client:
        msg = client.messages.create(model=MODEL, max_tokens=100, messages=USER)
    assert msg.stop_reason == "tool_use"
    text, tool = msg.content
    assert isinstance(text, TextBlock) and text.text == "reading"
    assert isinstance(tool, ToolUseBlock)
    assert (tool.name, tool.input) == ("Read", {"file_path": "a.txt"})
    assert tool.id.startswith("toolu_")


def test_tools_reply_gives_unique_tool_use_ids(api_server: MessagesServer) -> None:
    api_server.handler = lambda req: tools_reply(
        [("Bash", {"cmd": "ls"}), ("Bash", {"cmd": "pwd"})]
    )
    with _client(api_server) as client:
        first = client.messages.create(model=MODEL, max_tokens=100, messages=USER)
        second = client.messages.create(model=MODEL, max_tokens=100, messages=USER)
    ids = [b.id for m in (first, second) for b in m.content if isinstance(b, ToolUseBlock)]
    assert len(ids) == 4 == len(set(ids))
    assert [b.input for b in first.content] == [{"cmd": "ls"}, {"cmd": "pwd"}]


@pytest.mark.parametrize(
    "reply",
    [
        text_reply("a streamed answer that is longer than one chunk"),
        tool_reply("Write", {"file_path": "x.py", "content": "print('hi')\n" * 5}, text="ok"),
    ],
    ids=["text", "tool_use"],
)
def test_streaming_returns_same_content_as_non_streaming(
    api_server: MessagesServer, reply: Any
) -> None:
    api_server.handler = lambda req: reply
    with _client(api_server) as client:
        plain = client.messages.create(model=MODEL, max_tokens=100, messages=USER)
        with client.messages.stream(model=MODEL, max_tokens=100, messages=USER) as stream:
            streamed = stream.get_final_message()
    assert _dump(streamed.content) == _dump(plain.content)
    assert streamed.stop_reason == plain.stop_reason
    assert streamed.usage.output_tokens == plain.usage.output_tokens
    assert api_server.requests[1].body["stream"] is True


def test_529_then_200_succeeds_through_sdk_retry(api_server: MessagesServer) -> None:
    api_server.handler = lambda req: [
        error_reply(529, "overloaded_error", "Overloaded"),
        text_reply("recovered"),
    ]
    with _client(api_server, max_retries=2) as client:
        msg = client.messages.create(model=MODEL, max_tokens=100, messages=USER)
    assert msg.content[0].text == "recovered"
    assert len(api_server.requests) == 2


def test_401_raises_authentication_error_without_retry(api_server: MessagesServer) -> None:
    api_server.handler = lambda req: error_reply(401, "authentication_error", "bad key")
    with _client(api_server) as client, pytest.raises(anthropic.AuthenticationError) as info:
        client.messages.create(model=MODEL, max_tokens=100, messages=USER)
    assert "bad key" in str(info.value)
    assert len(api_server.requests) == 1


def test_concurrent_delayed_requests_are_all_in_flight_at_once(
    api_server: MessagesServer,
) -> None:
    n = 8
    api_server.handler = lambda req: text_reply(req.first_user_text, delay=0.3)

    async def run() -> list[str]:
        async with _aclient(api_server) as client:
            msgs = await asyncio.gather(
                *(
                    client.messages.create(
                        model=MODEL,
                        max_tokens=10,
                        messages=[{"role": "user", "content": f"q{i}"}],
                        tools=[{"name": "Agent", "input_schema": {"type": "object"}}]
                        if i % 2
                        else [],
                    )
                    for i in range(n)
                )
            )
        return [m.content[0].text for m in msgs]

    answers = asyncio.run(run())
    assert answers == [f"q{i}" for i in range(n)]
    assert api_server.max_in_flight == n
    assert api_server.max_in_flight_where(lambda r: r.is_parent) == n // 2


def test_unused_url_gives_connection_error() -> None:
    client = anthropic.Anthropic(base_url=unused_url(), api_key="test-key", max_retries=0)
    with client, pytest.raises(anthropic.APIConnectionError):
        client.messages.create(model=MODEL, max_tokens=10, messages=USER)


def test_handler_exception_becomes_500_and_is_recorded(api_server: MessagesServer) -> None:
    def broken(req: Request) -> Any:
        raise KeyError("no script for this")

    api_server.handler = broken
    with _client(api_server) as client, pytest.raises(anthropic.InternalServerError) as info:
        client.messages.create(model=MODEL, max_tokens=10, messages=USER)
    assert "KeyError" in str(info.value)
    assert len(api_server.requests) == 1  # x-should-retry: false, no SDK retries
    assert isinstance(api_server.handler_errors[0], KeyError)


def test_reply_list_repeats_last_and_counts_per_conversation(api_server: MessagesServer) -> None:
    api_server.handler = lambda req: [text_reply("one"), text_reply("two")]
    with _client(api_server) as client:

        def ask(text: str) -> str:
            msgs = [{"role": "user", "content": text}]
            return client.messages.create(model=MODEL, max_tokens=10, messages=msgs).content[0].text

        assert [ask("a"), ask("a"), ask("b"), ask("a")] == ["one", "two", "one", "two"]


@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/messages"), ("POST", "/v1/other")])
def test_other_routes_answer_404_json(api_server: MessagesServer, method: str, path: str) -> None:
    req = urllib.request.Request(api_server.base_url + path, data=b"{}", method=method)
    if method == "GET":
        req.data = None
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=5)
    assert info.value.code == 404
    assert json.loads(info.value.read())["error"]["type"] == "not_found_error"
    assert api_server.requests == []


def test_request_properties_flatten_system_messages_and_tool_results() -> None:
    body = {
        "model": MODEL,
        "system": [{"type": "text", "text": "sys A"}, {"type": "text", "text": "sys B"}],
        "tools": [{"name": "Bash"}, {"name": "Agent"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "do it"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"c": "x"}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "SECRET"}],
                    }
                ],
            },
        ],
    }
    req = Request(body=body, headers={})
    assert req.system == "sys A\nsys B"
    assert req.tool_names == ["Bash", "Agent"]
    assert req.is_parent
    assert req.turn == 1
    assert req.first_user_text == "do it"
    assert [r["tool_use_id"] for r in req.tool_results] == ["t1"]
    assert "SECRET" in req.text() and '"c": "x"' in req.text()
