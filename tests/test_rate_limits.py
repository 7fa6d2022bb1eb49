"""The gateway's limiter against a server that meters requests and input tokens as the API
does: calls wait in the gateway, in order, at the rate the headers teach, rather than be
refused; after a 429 every call waits out the retry-after. No durations are asserted: what
a limiter that did not hold would leave behind is refusals."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
from pathlib import Path

import pytest

from isoagent.parent.batch.display import BatchDisplay
from isoagent.parent.model.limiter import Waiting
from isoagent.parent.model.retry import RetryingSource, WaitNotices
from isoagent.parent.model.sdk import AnthropicSource
from isoagent.protocol import Message, ModelCall, ModelReply, TextBlock
from tests.conftest import cli_env
from tests.support.cli import read_jsonl, run_cli
from tests.support.messages_server import MessagesServer, Reply, Request, error_reply, text_reply
from tests.support.rate_limits import Overloaded, RateLimited
from tests.support.terminal import screen_of


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
    # fewer refusals than calls: after the first, calls wait in the gateway (without it, 7 of
    # the 8 are refused at once and most again on their retry); how many fewer (2-4 quiet)
    # depends on how the two clocks meet on a busy machine
    assert limited.refused < 8
    assert source.limiter.refused == limited.refused


def test_input_tokens_are_paced_from_each_request_s_size(
    api_server: MessagesServer, source: RetryingSource
) -> None:
    """Requests of about 500 input tokens against 1000 a second (requests unmetered)."""
    limited = RateLimited(lambda req: text_reply("ok"), input_tokens_per_second=1000)
    api_server.handler = limited
    replies = _all(source, [_call(n, words=250) for n in range(8)])
    assert [r.error for r in replies] == [None] * 8
    assert limited.refused < 8  # as above
    assert "input-tokens" in source.limiter.buckets


def test_an_overload_that_passes_loses_no_call(
    api_server: MessagesServer, source: RetryingSource
) -> None:
    """4 s of 529s, then every third and 3 answers cut mid-stream: longer than the SDK's own
    three retries waited."""
    overloaded = Overloaded(lambda req: text_reply("ok"), for_seconds=4.0, then_every=3, cut=3)
    api_server.handler = overloaded
    replies = _all(source, [_call(n) for n in range(12)])
    assert [r.error for r in replies] == [None] * 12
    assert [r.content for r in replies] == [[TextBlock("ok")]] * 12
    assert sum(r.retries for r in replies) == overloaded.overloaded + 3
    assert overloaded.overloaded >= 1 and overloaded.cut == 0


def test_a_batch_says_an_overload_once_and_each_line_counts_its_task_s_retries(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    wait = {"retry-after-ms": "1000"}  # long enough to be said
    overloaded = error_reply(529, "overloaded_error", "Overloaded", headers=wait)
    api_server.handler = lambda req: [overloaded, text_reply("done")]
    (tmp_path / "tasks.txt").write_text("".join(f"task {n}\n" for n in range(6)))
    args = ["batch", "tasks.txt", "-j", "6", "-o", "out.jsonl"]
    done = run_cli(args, cli_env(api_server), cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [line["retries"] for line in read_jsonl(tmp_path / "out.jsonl")] == [1] * 6
    assert done.stderr.count("isoagent: API overloaded (529): retrying, attempt 2") == 1


def test_the_json_result_counts_the_retries(api_server: MessagesServer, tmp_path: Path) -> None:
    refused = error_reply(429, "rate_limit_error", "Rate limited")
    api_server.handler = lambda req: [refused, refused, text_reply("done")]
    args = ["task", "--output-format", "json", "say done"]
    done = run_cli(args, cli_env(api_server), cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["retries"] == 2


def test_the_batch_line_shows_what_calls_wait_on_and_a_change_is_written_above_it_once() -> None:
    stream = io.StringIO()
    display = BatchDisplay(3, stream, live=True)
    waits = WaitNotices()
    display.start(waits)
    for seconds in (12, 11, 10):  # three calls, one state
        waits(Waiting("rate_limit", f"rate limited (60 requests/min): waiting {seconds} s", 12))
    assert display.status().endswith("; rate limited (60 requests/min): waiting 10 s")
    assert stream.getvalue().count("isoagent: rate limited (60 requests/min)") == 1
    display.close()
    lines = screen_of(stream.getvalue())
    assert lines[0] == "isoagent: rate limited (60 requests/min): waiting 12 s", lines
    assert lines[1].startswith("isoagent: batch: 0/3 done") and "waiting" not in lines[1]
    assert len(lines) == 2


def test_a_batch_refused_again_and_again_says_so_once_the_waits_add_up(
    api_server: MessagesServer, tmp_path: Path
) -> None:
    """A server (a proxy) that lets one request a second through and refuses the rest with a
    bare 429, no rate-limit headers: each refusal holds the calls for less than a second, and
    a 10-task batch met dozens while stderr said nothing. The short waits are said once they
    add up, with how many and how long in all, and not once per refusal."""
    lock, last, refused = threading.Lock(), [0.0], [0]

    def one_a_second(req: Request) -> Reply:
        with lock:
            now = time.monotonic()
            if now - last[0] < 1.0:
                refused[0] += 1
                return error_reply(429, "rate_limit_error", "slow down")
            last[0] = now
        return text_reply("ok")

    api_server.handler = one_a_second
    (tmp_path / "tasks.txt").write_text("".join(f"task {n}\n" for n in range(6)))
    args = ["batch", "tasks.txt", "-j", "3", "-o", "out.jsonl"]
    done = run_cli(args, cli_env(api_server), cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("isoagent: rate limited")]
    assert said and "s in all so far)" in said[0], done.stderr
    assert len(said) < refused[0]  # not a line a refusal (under load the server refuses fewer)


def test_the_backoff_of_the_thousandth_retry_is_the_longest_not_an_overflow() -> None:
    from isoagent.parent.model.retry import MAX_DELAY, backoff

    assert MAX_DELAY / 2 <= backoff(5000) <= MAX_DELAY


def test_calls_held_by_bare_429s_go_at_the_rate_the_server_let_through(
    api_server: MessagesServer, source: RetryingSource
) -> None:
    """A proxy that meters 2 requests a second and says so only by refusing (no rate-limit
    headers, a 1 s retry-after): once a 429 has held them, the calls go at the rate the
    server let through before it, not all at once when the hold ends (each such wave was
    refused but for one call: 16 calls met dozens of 429s)."""
    limited = RateLimited(lambda req: text_reply("ok"), requests_per_second=2, headers=False)
    api_server.handler = limited
    replies = _all(source, [_call(n) for n in range(16)])
    assert [r.error for r in replies] == [None] * 16
    assert limited.refused <= 4 + 3  # the first window, and a few at the edge of the rate


def test_a_call_waiting_on_a_bucket_goes_as_soon_as_an_answer_says_it_refilled() -> None:
    """The call at the head of the queue reckoned a minute's wait from what it knew; the
    next answer's headers say the bucket is full again: it goes then, not a minute later
    (a 429 wave's answers, heard while a call slept on a wait reckoned before them, cost
    the tight batch 2-3 s a wave)."""
    from datetime import UTC, datetime, timedelta

    from isoagent.parent.model.limiter import Limiter

    def said(remaining: int) -> dict[str, str]:
        reset = datetime.now(UTC) + timedelta(seconds=60 if remaining == 0 else 0)
        return {
            "anthropic-ratelimit-requests-limit": "1",
            "anthropic-ratelimit-requests-remaining": str(remaining),
            "anthropic-ratelimit-requests-reset": reset.isoformat(),
        }

    async def go() -> None:
        limiter = Limiter()
        deadline = time.monotonic() + 600
        first = await limiter.admit(10, deadline)  # no bucket known yet: it goes at once
        assert first is not None
        limiter.heard(200, said(0))  # empty, refilled in a minute
        waiting = asyncio.ensure_future(limiter.admit(10, deadline))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        limiter.heard(200, said(1))  # the server's news: full again
        assert await asyncio.wait_for(waiting, 20) is not None

    asyncio.run(go())
