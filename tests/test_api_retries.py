"""The gateway's retries: what the API refuses for now is tried again until it answers or
the call's deadline passes; what it refuses as asked is not; each call says how many tries
it needed."""

from __future__ import annotations

import asyncio

import pytest

from isoagent.parent.model.limiter import Waiting
from isoagent.parent.model.retry import RetryingSource, WaitSink
from isoagent.parent.model.sdk import AnthropicSource
from isoagent.protocol import Message, ModelCall, ModelReply, TextBlock
from tests.support.messages_server import MessagesServer, error_reply, text_reply

CALL = ModelCall(0, "m", 100, "sys", [Message("user", [TextBlock("hi")])])


@pytest.fixture
def source(api_server: MessagesServer, monkeypatch: pytest.MonkeyPatch) -> RetryingSource:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api_server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    return RetryingSource(AnthropicSource())


def _run(
    source: RetryingSource, deadline: float | None = None, on_wait: WaitSink | None = None
) -> ModelReply:
    async def go() -> ModelReply:
        try:
            return await source.complete(CALL, deadline=deadline, on_wait=on_wait)
        finally:
            await source.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (529, "overloaded_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "api_error"),
        (504, "api_error"),
    ],
)
def test_a_call_refused_for_now_is_retried_and_its_usage_counts_once(
    api_server: MessagesServer, source: RetryingSource, status: int, kind: str
) -> None:
    refused = error_reply(status, kind, "try later")
    api_server.handler = lambda req: [refused, refused, text_reply("done", usage=(7, 3))]
    reply = _run(source)
    assert reply.error is None, reply.error
    assert reply.content == [TextBlock("done")]
    assert reply.retries == 2
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (7, 3)
    assert len(api_server.requests) == 3


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
    ],
)
def test_a_call_refused_as_asked_is_not_retried(
    api_server: MessagesServer, source: RetryingSource, status: int, kind: str
) -> None:
    api_server.handler = lambda req: error_reply(status, kind, "no")
    reply = _run(source)
    assert reply.error is not None and reply.error.status_code == status
    assert reply.retries == 0
    assert len(api_server.requests) == 1


def test_an_overload_that_outlasts_the_deadline_fails_saying_which_and_how_long(
    api_server: MessagesServer, source: RetryingSource
) -> None:
    wait = {"retry-after-ms": "1000"}  # a wait long enough to be said
    overloaded = error_reply(529, "overloaded_error", "Overloaded", headers=wait)
    api_server.handler = lambda req: overloaded
    waits: list[Waiting] = []
    reply = _run(source, deadline=2.2, on_wait=waits.append)
    error = reply.error
    assert error is not None and error.kind == "overloaded" and error.status_code == 529
    assert error.message.startswith("API overloaded for ")
    assert "gave up at the retry deadline" in error.message
    assert reply.retries == len(api_server.requests) - 1 >= 1
    assert (waits[0].kind, waits[0].message) == (
        "overloaded",
        "API overloaded (529): retrying, attempt 2 (for up to 2 s)",
    )


def test_the_server_s_retry_after_is_honoured(
    api_server: MessagesServer, source: RetryingSource
) -> None:
    """A 503 that asks for 2 s: without the wait the backoff (at most 0.5 s for a first
    retry) would have sent the second attempt well inside the 1.5 s deadline."""
    busy = error_reply(503, "api_error", "busy", headers={"retry-after": "2"})
    busy.headers.pop("retry-after-ms")
    api_server.handler = lambda req: [busy, text_reply("done")]
    reply = _run(source, deadline=1.5)
    assert reply.error is not None and reply.error.kind == "server"
    assert len(api_server.requests) == 1  # it gave up rather than retry too soon


def test_a_server_error_the_server_says_not_to_retry_is_not_retried(
    api_server: MessagesServer, source: RetryingSource
) -> None:
    broken = error_reply(500, "api_error", "broken", headers={"x-should-retry": "false"})
    api_server.handler = lambda req: broken
    reply = _run(source)
    assert reply.error is not None and reply.error.status_code == 500
    assert len(api_server.requests) == 1


def test_a_sound_retry_after_holds_the_calls_as_long_as_it_says_and_no_longer(
    api_server: MessagesServer, source: RetryingSource
) -> None:
    """A call refused five times, each 429 saying ``retry-after: 1``: every hold is the
    server's second. Taking the longer of it and the backoff held the fourth and fifth
    retries 2-8 s each: a batch against a tight limit ran 2.8 times its ideal."""
    refused = error_reply(429, "rate_limit_error", "slow down", headers={"retry-after": "1"})
    refused.headers.pop("retry-after-ms")
    api_server.handler = lambda req: [refused] * 5 + [text_reply("done")]
    waits: list[Waiting] = []
    reply = _run(source, on_wait=waits.append)
    assert reply.error is None and reply.retries == 5
    holds = [w.seconds for w in waits if w.kind == "rate_limit" and "holding" in w.message]
    assert len(holds) == 5
    assert max(holds) <= 1.0 + 0.01, holds


def test_a_retry_after_too_short_to_be_meant_is_backed_off_and_a_sound_one_is_not() -> None:
    """A proxy's ``retry-after-ms: 1`` would have the calls retry a thousand times a
    second: the backoff applies there, and where the server said nothing."""
    from isoagent.parent.model.retry import FIRST_DELAY, retry_delay

    assert retry_delay(0.001, 1) >= FIRST_DELAY / 2
    assert retry_delay(0.0, 1) >= FIRST_DELAY / 2
    assert retry_delay(1.0, 12) == 1.0  # the 12th attempt's backoff would be up to 8 s
    assert retry_delay(30.0, 1) == 30.0
