"""``batch --api-batches``: the children's model turns, sent as Anthropic Message Batches.

The Message Batches API answers at half the price of the Messages API, in minutes to hours,
not seconds: one agent's sequential turns would crawl, but a batch of agents sends one Message
Batch per *round*. ``BatchSource`` is a model source whose ``complete`` queues the call; its
dispatcher sends what is queued as one Message Batch when every live child waits on the queue
(none on a batch in flight), when ``window`` seconds have passed since the oldest queued call,
or at the API's size limits. A poller per batch retrieves it at growing intervals until it
has ended, then reads its results and answers each call.

A request that errored (but for one the API refuses as asked), expired or was canceled goes
back in the queue for the next batch; how long a call may wait is its child's ``--timeout``
(the supervisor cancels it), so a task past its deadline fails alone. The batch price is
``BATCH_PRICE`` of the normal one, which ``CostBudget`` applies.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from isoagent.parent.model.limiter import Waiting
from isoagent.parent.model.retry import RETRIED, UNREACHED_ATTEMPTS, WaitSink, backoff
from isoagent.parent.model.sdk import AnthropicSource, message_reply, request_body
from isoagent.protocol import ModelCall, ModelError, ModelReply

MAX_REQUESTS = 100_000  # the API's limits on one Message Batch
MAX_BYTES = 256 * 1024 * 1024
FIRST_POLL = 0.5  # seconds between a batch's polls: a tenth of its age, within these
LAST_POLL = 60.0
CHECK = 0.1  # seconds between looks at how many children are live, while calls wait
SAID_EVERY = 60.0  # a batch's progress is said again after this
CANCEL_SECONDS = 5.0  # for cancelling the batches in flight, at the end
# errored results sent again: the API's transient errors (a request it refuses as asked would
# be refused again)
_RETRIED_ERRORS = {
    "rate_limit_error": "rate_limit",
    "overloaded_error": "overloaded",
    "api_error": "server",
    "timeout_error": "server",
}
_encoder = msgspec.json.Encoder()


class _Result(msgspec.Struct):
    type: str
    message: msgspec.Raw = msgspec.Raw(b"")
    error: dict[str, Any] = {}


class _Line(msgspec.Struct):
    """One line of a batch's results (JSONL)."""

    custom_id: str
    result: _Result


_line_decoder = msgspec.json.Decoder(_Line)


@dataclass(eq=False)
class _Queued:
    """A call waiting for its answer, and the request that asks for it."""

    call: ModelCall
    params: dict[str, Any]
    size: int  # the request's bytes, about
    answer: asyncio.Future[ModelReply]
    queued: float = field(default_factory=time.monotonic)
    sent: int = 0  # times it went into a batch


@dataclass
class BatchStats:
    """What a run sent: Message Batches, requests, and the requests sent again."""

    batches: int = 0
    requests: int = 0
    errored: int = 0
    expired: int = 0
    canceled: int = 0
    abandoned: int = 0  # answered after their child had stopped waiting (its timeout)

    def summary(self) -> str:
        again = ", ".join(
            f"{count} {kind}"
            for kind, count in (
                ("errored", self.errored),
                ("expired", self.expired),
                ("canceled", self.canceled),
            )
            if count
        )
        batches = "Message Batch" if self.batches == 1 else "Message Batches"
        said = f"sent {self.batches} {batches}, {self.requests:,} requests"
        if again:
            said += f" ({again}: sent again)"
        if self.abandoned:
            said += f"; {self.abandoned} answered after their task's timeout"
        return said


class BatchSource:
    """Model calls pooled into Message Batches. ``live`` says how many children are running:
    when every one of them waits here, the queue is sent without waiting out the window."""

    def __init__(
        self,
        source: AnthropicSource,
        *,
        window: float,
        live: Callable[[], int] | None = None,
        on_wait: WaitSink | None = None,
    ) -> None:
        self.source = source
        self.batches = source.client.messages.batches
        self.window = window
        self.live = live
        self._api_error: type[Exception] = source.api_error
        self.on_wait = on_wait
        self.stats = BatchStats()
        self._queue: list[_Queued] = []
        self._flying: dict[str, _Queued] = {}  # custom_id -> call, of the batches in flight
        self._ids = 0
        self._woken = asyncio.Event()
        self._dispatcher: asyncio.Task[None] | None = None
        self._pollers: dict[str, asyncio.Task[None]] = {}  # by the id of the batch in flight
        self._failures = 0  # creates that failed in a row

    async def complete(self, call: ModelCall) -> ModelReply:
        params = request_body(call)
        del params["stream"]  # a batched request is answered whole
        queued = _Queued(call, params, len(_encoder.encode(params)), asyncio.Future())
        self._queue.append(queued)
        self._woken.set()
        if self._dispatcher is None:
            self._dispatcher = asyncio.create_task(self._dispatch())
        try:
            return await queued.answer
        finally:  # its child stopped waiting (a timeout): it leaves the queue, if still there
            with contextlib.suppress(ValueError):
                self._queue.remove(queued)

    async def aclose(self) -> None:
        """Stop sending and polling, and cancel the batches still in flight (a run that was
        interrupted): nothing would read their results."""
        in_flight = list(self._pollers)
        for task in (self._dispatcher, *self._pollers.values()):
            if task is not None:
                task.cancel()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CANCEL_SECONDS):
                for batch_id in in_flight:
                    with contextlib.suppress(self._api_error):
                        await self.batches.cancel(batch_id)
        if self.stats.batches:
            self._say("done", self.stats.summary())
        await self.source.aclose()

    # -- sending ---------------------------------------------------------------

    async def _dispatch(self) -> None:
        while True:
            if not self._queue:
                self._woken.clear()
                await self._woken.wait()
                continue
            if not self._due():
                self._woken.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._woken.wait(), CHECK)
                continue
            error = await self._send(self._take())
            if error is None:
                self._failures = 0
                continue
            self._failures += 1
            unreached = error.kind == "connection" and not self.stats.batches
            if unreached and self._failures >= UNREACHED_ATTEMPTS:  # a wrong address
                said = f"{error.message} ({self._failures} attempts; it has never answered)"
                failed, self._queue = self._queue, []
                self._fail(failed, ModelError("connection", said))
                continue
            self._say("batch", f"cannot send a Message Batch for now: {error.message}")
            await asyncio.sleep(backoff(self._failures))

    def _due(self) -> bool:
        """Whether the queue goes now: every live child waits in it, the window has passed,
        or it is as large as a batch may be."""
        queue = self._queue
        if self.live is not None and len(queue) >= self.live():
            return True
        if time.monotonic() - queue[0].queued >= self.window:
            return True
        return len(queue) >= MAX_REQUESTS or sum(q.size for q in queue) >= MAX_BYTES

    def _take(self) -> list[_Queued]:
        """The oldest calls of the queue, as many as one batch holds."""
        taken: list[_Queued] = []
        size = 0
        for queued in self._queue:
            if len(taken) == MAX_REQUESTS or (size + queued.size > MAX_BYTES and taken):
                break
            taken.append(queued)
            size += queued.size
        del self._queue[: len(taken)]
        return taken

    async def _send(self, calls: list[_Queued]) -> ModelError | None:
        """One Message Batch of ``calls``; the error, with ``calls`` queued again, if the
        API could not take it for now."""
        requests = []
        named: dict[str, _Queued] = {}
        for queued in calls:
            self._ids += 1
            custom_id = f"r{self._ids}"
            named[custom_id] = queued
            requests.append({"custom_id": custom_id, "params": queued.params})
        try:
            batch = await self.batches.create(requests=requests)  # type: ignore[arg-type]
        except self._api_error as exc:
            error = self.source.describe(exc)
            if error.kind in RETRIED:
                self._queue[:0] = calls
                return error
            for queued in calls:
                _answer(queued, ModelReply(queued.call.turn, error=error))
            return None
        self.stats.batches += 1
        self.stats.requests += len(calls)
        for queued in calls:
            queued.sent += 1
        self._flying.update(named)
        poller = asyncio.create_task(self._follow(batch.id, self.stats.batches, named))
        self._pollers[batch.id] = poller
        poller.add_done_callback(lambda _: self._pollers.pop(batch.id, None))
        return None

    # -- answers ---------------------------------------------------------------

    async def _follow(self, batch_id: str, number: int, named: dict[str, _Queued]) -> None:
        """Poll the batch until it has ended, then answer its calls from its results."""
        sent = said = time.monotonic()
        self._say(f"batch {batch_id}", _progress(number, batch_id, 0, len(named), 0.0))
        failures = 0
        cancelled = False
        try:
            while True:
                age = time.monotonic() - sent
                await asyncio.sleep(min(max(age / 10, FIRST_POLL), LAST_POLL))
                try:
                    batch = await self.batches.retrieve(batch_id)
                except self._api_error as exc:
                    error = self.source.describe(exc)
                    if error.kind not in RETRIED:
                        return self._fail(named.values(), error)
                    failures += 1
                    await asyncio.sleep(backoff(failures))
                    continue
                failures = 0
                if batch.processing_status == "ended":
                    break
                if not cancelled and all(q.answer.done() for q in named.values()):
                    cancelled = True  # no child waits for it any more: spare what is left
                    with contextlib.suppress(self._api_error):
                        await self.batches.cancel(batch_id)
                now = time.monotonic()
                if now - said >= SAID_EVERY:
                    said = now
                    done = len(named) - batch.request_counts.processing
                    progress = _progress(number, batch_id, done, len(named), now - sent)
                    self._say(f"batch {batch_id}", progress, LAST_POLL)
            await self._read(batch_id, named)
        finally:
            for custom_id in named:
                self._flying.pop(custom_id, None)
            self._woken.set()

    async def _read(self, batch_id: str, named: dict[str, _Queued]) -> None:
        """Answer each call from the batch's results; read again if the reading breaks."""
        unread = dict(named)
        attempt = 0
        while unread:
            try:
                results = self.batches.with_streaming_response.results(batch_id)
                async with results as response:
                    async for line in response.iter_lines():
                        if line.strip():
                            self._answer(_line_decoder.decode(line), unread)
                return
            except self._api_error as exc:
                error = self.source.describe(exc)
                attempt += 1
                if error.kind not in RETRIED:
                    return self._fail(unread.values(), error)
                await asyncio.sleep(backoff(attempt))

    def _answer(self, line: _Line, unread: dict[str, _Queued]) -> None:
        queued = unread.pop(line.custom_id, None)
        if queued is None:
            return
        result = line.result
        turn = queued.call.turn
        if queued.answer.done():  # its child no longer waits
            self.stats.abandoned += result.type == "succeeded"
            return
        if result.type == "succeeded":
            reply = message_reply(turn, result.message)
            _answer(queued, msgspec.structs.replace(reply, retries=queued.sent - 1))
            return
        if result.type == "errored":
            error = result.error.get("error", result.error)
            kind = _RETRIED_ERRORS.get(error.get("type", ""))
            if kind is None:
                message = f"{error.get('type', 'error')}: {error.get('message', '')}"
                _answer(queued, ModelReply(turn, error=ModelError("bad_request", message)))
                return
            self.stats.errored += 1
        elif result.type == "expired":
            self.stats.expired += 1
        else:
            self.stats.canceled += 1
        self._queue.append(queued)  # into the next batch
        self._woken.set()

    def _fail(self, calls: Iterable[_Queued], error: ModelError) -> None:
        for queued in calls:
            _answer(queued, ModelReply(queued.call.turn, error=error))

    def _say(self, kind: str, message: str, seconds: float = 0.0) -> None:
        if self.on_wait is not None:
            self.on_wait(Waiting(kind, message, seconds))


def _answer(queued: _Queued, reply: ModelReply) -> None:
    if not queued.answer.done():
        queued.answer.set_result(reply)


def _progress(number: int, batch_id: str, done: int, total: int, seconds: float) -> str:
    """What a batch's calls wait for: "round 3: batch msgbatch_... 812/1,000 done, 4 min"."""
    age = f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"
    return f"round {number}: batch {batch_id} {done:,}/{total:,} done, {age}"
