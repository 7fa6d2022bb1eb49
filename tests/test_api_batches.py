"""``isoagent batch --api-batches``: every child's model turn goes into Anthropic Message
Batches, at the batch price; and the test server's Message Batches API it is tested against."""

from __future__ import annotations

import asyncio

import anthropic

from tests.support.messages_server import MessagesServer, Reply, Request, error_reply, text_reply


def _params(text: str) -> dict[str, object]:
    return {
        "model": "claude-test",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": text}],
    }


def test_the_test_server_speaks_the_message_batches_api_through_the_sdk(
    api_server: MessagesServer,
) -> None:
    def script(request: Request) -> list[Reply]:
        if request.first_user_text == "expires":
            return [Reply(batch_result="expired"), text_reply("late")]
        if request.first_user_text == "errs":
            return [error_reply(529, "overloaded_error", "Overloaded")]
        return [text_reply(f"did {request.first_user_text}")]

    api_server.handler = script
    api_server.batch_delay = 0.2

    async def talk() -> None:
        client = anthropic.AsyncAnthropic(base_url=api_server.base_url, api_key="test-key")
        batches = client.messages.batches
        texts = ["a", "expires", "errs", "b"]
        sent = [{"custom_id": f"r{n}", "params": _params(t)} for n, t in enumerate(texts)]
        batch = await batches.create(requests=sent)  # type: ignore[arg-type]
        assert batch.processing_status == "in_progress"
        assert batch.request_counts.processing == 4 and batch.results_url is None
        kept = await batches.create(requests=sent[:1])  # type: ignore[arg-type]
        assert (await batches.cancel(kept.id)).processing_status == "canceling"
        while (batch := await batches.retrieve(batch.id)).processing_status != "ended":
            await asyncio.sleep(0.05)
        counts = batch.request_counts
        assert (counts.succeeded, counts.errored, counts.expired, counts.processing) == (2, 1, 1, 0)
        results = {line.custom_id: line.result async for line in await batches.results(batch.id)}
        assert (
            results["r0"].type == "succeeded" and results["r0"].message.content[0].text == "did a"
        )
        assert results["r1"].type == "expired"
        assert results["r2"].type == "errored"
        assert results["r2"].error.error.type == "overloaded_error"
        canceled = [line.result.type async for line in await batches.results(kept.id)]
        assert canceled == ["canceled"]
        listed = await batches.list()
        assert {b.id for b in listed.data} == {batch.id, kept.id}
        await client.close()

    asyncio.run(talk())
    # each batched request was answered by the handler and recorded, with its custom_id
    assert sorted(r.custom_id for r in api_server.requests) == ["r0", "r1", "r2", "r3"]
