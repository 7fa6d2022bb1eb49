"""The SDK model source: replies become our Structs; what we cannot use is dropped or explained."""

from __future__ import annotations

import asyncio

import pytest

from isoagent.parent.model.sdk import AnthropicSource
from isoagent.protocol import (
    Message,
    ModelCall,
    RedactedThinkingBlock,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
    WebSearchResultBlock,
)
from tests.support.messages_server import MessagesServer, Reply, error_reply

CALL = ModelCall(0, "m", 100, "sys", [Message("user", [TextBlock("hi")])])


@pytest.fixture
def source(api_server: MessagesServer, monkeypatch: pytest.MonkeyPatch) -> AnthropicSource:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api_server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    return AnthropicSource(max_retries=0)


def test_text_tool_use_thinking_and_web_search_blocks_arrive_as_structs_others_dropped(
    api_server: MessagesServer, source: AnthropicSource
) -> None:
    api_server.handler = lambda req: Reply(
        content=[
            {"type": "thinking", "thinking": "hmm", "signature": "x"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "thinking", "thinking": "no signature"},  # some compatible servers
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
            {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "x", "server_name": "s"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
        ],
        stop_reason="tool_use",
        usage=(12, 7),
    )
    reply = asyncio.run(source.complete(CALL))
    assert reply.error is None
    assert reply.content == [
        ThinkingBlock("hmm", "x"),
        RedactedThinkingBlock("opaque"),
        ThinkingBlock("no signature"),
        ServerToolUseBlock("srvtoolu_1", "web_search", {}),
        WebSearchResultBlock("srvtoolu_1", []),
        TextBlock("Let me look."),
        ToolUseBlock("toolu_1", "Bash", {"command": "ls"}),
    ]
    assert reply.stop_reason == "tool_use" and reply.usage == Usage(12, 7)
    request = api_server.requests[0]
    assert request.system == "sys" and "tools" not in request.body


def test_api_error_becomes_a_model_error_not_an_exception(
    api_server: MessagesServer, source: AnthropicSource
) -> None:
    api_server.handler = lambda req: Reply(
        status=400, error_type="invalid_request_error", error_message="max_tokens too large"
    )
    reply = asyncio.run(source.complete(CALL))
    assert reply.error is not None and reply.error.kind == "bad_request"
    assert reply.error.message == "400: invalid_request_error: max_tokens too large"


@pytest.mark.parametrize(
    ("status", "error_type", "message"),
    [
        (400, "auth_error", "Authentication Error, Invalid proxy server token passed."),
        (400, "invalid_request_error", "Invalid API key provided"),
        (401, "authentication_error", "invalid x-api-key"),
        (403, "permission_error", "not allowed"),
    ],
)
def test_a_refused_key_is_an_auth_error_whatever_status_a_proxy_gives(
    api_server: MessagesServer, source: AnthropicSource, status: int, error_type: str, message: str
) -> None:
    api_server.handler = lambda req: error_reply(status, error_type, message)
    reply = asyncio.run(source.complete(CALL))
    assert reply.error is not None and reply.error.kind == "auth"
    assert reply.error.status_code == status and "check ANTHROPIC_API_KEY" in reply.error.message


def test_a_bad_request_that_is_not_about_the_key_stays_a_bad_request(
    api_server: MessagesServer, source: AnthropicSource
) -> None:
    api_server.handler = lambda req: error_reply(400, "invalid_request_error", "prompt too long")
    reply = asyncio.run(source.complete(CALL))
    assert reply.error is not None and reply.error.kind == "bad_request"


@pytest.mark.parametrize("suffix", ["/v1", "/v1/", ""])
def test_a_base_url_ending_in_v1_reaches_the_messages_endpoint(
    api_server: MessagesServer, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api_server.base_url + suffix)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    reply = asyncio.run(AnthropicSource(max_retries=0).complete(CALL))
    assert reply.error is None, reply.error
    assert len(api_server.requests) == 1
