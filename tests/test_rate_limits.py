"""The gateway's limiter against a server that meters requests and input tokens as the API
does: calls wait in the gateway, in order, at the rate the headers teach, rather than be
refused; after a 429 every call waits out the retry-after. No durations are asserted: what
a limiter that did not hold would leave behind is refusals."""

from __future__ import annotations

import asyncio

import pytest

from isoagent.parent.model.retry import RetryingSource
from isoagent.parent.model.sdk import AnthropicSource
from isoagent.protocol import Message, ModelCall, ModelReply, TextBlock
from tests.support.messages_server import MessagesServer, text_reply
from tests.support.rate_limits import Overloaded, RateLimited


def _call(n: int, words: int = 1) -> ModelCall:
    return ModelCall(0, "m", 100, "sys", [Message("user", [TextBlock(f"task {n} " * words)])])


@pytest.fixture
def source(api_server: MessagesServer, monkeypatch: pytest.MonkeyPatch) -> RetryingSource:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api_server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    return RetryingSource(AnthropicSource())


def _all(source: RetryingSource, calls: list[ModelCall]) -> list[ModelReply]:
    async def go() -> list[ModelReply]:
        try:
            return list(await asyncio.gather(*(source.complete(c) for c in calls)))
        finally:
            await source.aclose()

    return asyncio.run(go())


def test_calls_past_the_request_limit_wait_in_the_gateway_instead_of_being_refused(
    api_server: MessagesServer, source: RetryingSource
) -> None:
    """16 calls at once against 4 requests a second: the SDK's own retries (3, quickly)
    lost most of them; each refused call retrying alone is refused again and again."""
    limited = RateLimited(lambda req: text_reply("ok"), requests_per_second=4)
    api_server.handler = limited
    replies = _all(source, [_call(n) for n in range(16)])
    assert [r.error for r in replies] == [None] * 16
    assert limited.admitted == 16
    assert limited.refused <= 4  # the first window, before the headers were heard
    assert sum(r.retries for r in replies) == limited.refused


def test_after_a_429_every_call_waits_out_the_retry_after(
    api_server: MessagesServer, source: RetryingSource
) -> None:
    """One request a second, eight calls at once: one call's refusal holds them all."""
    limited = RateLimited(lambda req: text_reply("ok"), requests_per_second=1)
    api_server.handler = limited
    replies = _all(source, [_call(n) for n in range(8)])
    assert [r.error for r in replies] == [None] * 8
    assert limited.refused <= 4
    assert source.limiter.refused == limited.refused


def test_input_tokens_are_paced_from_each_request_s_size(
    api_server: MessagesServer, source: RetryingSource
) -> None:
    """Requests of about 500 input tokens against 1000 a second (requests unmetered)."""
    limited = RateLimited(lambda req: text_reply("ok"), input_tokens_per_second=1000)
    api_server.handler = limited
    replies = _all(source, [_call(n, words=250) for n in range(8)])
    assert [r.error for r in replies] == [None] * 8
    assert limited.refused <= 4
    assert "input-tokens" in source.limiter.buckets


def test_an_overload_that_passes_loses_no_call(
    api_server: MessagesServer, source: RetryingSource
) -> None:
    """4 s of 529s, then every third: longer than the SDK's own three retries waited."""
    overloaded = Overloaded(lambda req: text_reply("ok"), for_seconds=4.0, then_every=3)
    api_server.handler = overloaded
    replies = _all(source, [_call(n) for n in range(12)])
    assert [r.error for r in replies] == [None] * 12
    assert sum(r.retries for r in replies) == overloaded.overloaded >= 1
