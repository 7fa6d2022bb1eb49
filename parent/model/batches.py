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
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from isoagent.parent.model.batch_journal import BatchJournal, digest
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
_RETRIED_ERRORS = frozenset({"rate_limit_error", "overloaded_error", "api_error", "timeout_error"})
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
_MISSING = _Result("errored", error={"type": "api_error", "message": "not in the results"})


@dataclass(eq=False)
class _Queued:
    """A call waiting for its answer, and the request that asks for it."""

    call: ModelCall
    params: dict[str, Any]
    digest: str  # of the request, in the journal
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
    resumed: int = 0  # answered from an earlier run's Message Batches (a rerun)

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
        if self.resumed:
            said += f"; {self.resumed:,} turns answered from an earlier run's Message Batches"
        return said


class BatchSource:
    """Model calls pooled into Message Batches. ``live`` says how many children are running:
    when every one of them waits here, the queue is sent without waiting out the window.
    ``journal``: where the batches are kept for a rerun, and what earlier runs sent."""

    def __init__(
        self,
        source: AnthropicSource,
        *,
        window: float,
        live: Callable[[], int] | None = None,
        on_wait: WaitSink | None = None,
        journal: BatchJournal | None = None,
    ) -> None:
        self.source = source
        self.batches = source.client.messages.batches
        self.window = window
        self.live = live
        self.journal = journal
        self._api_error: type[Exception] = source.api_error
        self.on_wait = on_wait
        self.stats = BatchStats()
        self._queue: list[_Queued] = []
        self._run = secrets.token_hex(4)  # custom ids are this run's own, in the journal too
        self._ids = 0
        self._woken = asyncio.Event()
        self._dispatcher: asyncio.Task[None] | None = None
        self._pollers: dict[str, asyncio.Task[None]] = {}  # by the id of the batch in flight
        # the results of earlier runs' batches (a rerun), fetched once each
        self._earlier: dict[str, asyncio.Task[dict[str, _Result] | ModelError]] = {}
        self._failures = 0  # creates that failed in a row
        self._more = False  # the last batch was full: the rest of the queue goes next
        if journal is not None and journal.unsent:
            self._say(
                "journal",
                f"{journal.unsent} requests of an earlier run were being sent when it was "
                "killed: if the API took them, they are paid and sent again",
            )

    async def complete(self, call: ModelCall) -> ModelReply:
        params = request_body(call)
        del params["stream"]  # a batched request is answered whole
        encoded = _encoder.encode(params)
        queued = _Queued(call, params, digest(encoded), len(encoded), asyncio.Future())
        if self.journal is not None and (earlier := self.journal.take(queued.digest)):
            reply = await self._from_earlier(*earlier, call.turn)
            if reply is not None:
                self.stats.resumed += 1
                return reply
        self._queue.append(queued)
        self._woken.set()
        if self._dispatcher is None:
            self._dispatcher = asyncio.create_task(self._dispatch())
        try:
            return await queued.answer
        finally:  # its child stopped waiting (a timeout): it leaves the queue, if still there
            if not queued.answer.done():  # an answered call has left it (taken, then sent)
                with contextlib.suppress(ValueError):
                    self._queue.remove(queued)

    async def aclose(self) -> None:
        """Stop sending and polling. Without a journal, cancel the batches still in flight
        (a run that was interrupted): no rerun would read their results."""
        in_flight = list(self._pollers)
        for task in (self._dispatcher, *self._pollers.values(), *self._earlier.values()):
            if task is not None:
                task.cancel()
        if self.journal is None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CANCEL_SECONDS):
                    for batch_id in in_flight:
                        with contextlib.suppress(self._api_error):
                            await self.batches.cancel(batch_id)
        else:
            self.journal.close()
        if self.stats.batches or self.stats.resumed:
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
        or it is as large as a batch may be (and what the last full batch left)."""
        queue = self._queue
        if self._more or (self.live is not None and len(queue) >= self.live()):
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
        self._more = len(taken) < len(self._queue)  # the others were due as well: next
        del self._queue[: len(taken)]
        return taken

    async def _send(self, calls: list[_Queued]) -> ModelError | None:
        """One Message Batch of ``calls``, in the journal before and after; the error, with
        ``calls`` queued again, if the API could not take it for now."""
        requests = []
        named: dict[str, _Queued] = {}
        for queued in calls:
            self._ids += 1
            custom_id = f"{self._run}-{self._ids}"
            named[custom_id] = queued
            requests.append({"custom_id": custom_id, "params": queued.params})
        digests = {custom_id: queued.digest for custom_id, queued in named.items()}
        self._journal(lambda journal: journal.sending(digests))
        try:
            batch = await self.batches.create(requests=requests)  # type: ignore[arg-type]
        except self._api_error as exc:
            error = self.source.describe(exc)
            if error.kind in RETRIED:
                self._queue[:0] = calls
                return error
            self._fail(calls, error)
            return None
        self._journal(lambda journal: journal.sent(batch.id, digests))
        self.stats.batches += 1
        self.stats.requests += len(calls)
        for queued in calls:
            queued.sent += 1
        poller = asyncio.create_task(self._follow(batch.id, self.stats.batches, named))
        self._pollers[batch.id] = poller
        poller.add_done_callback(lambda _: self._pollers.pop(batch.id, None))
        return None

    def _journal(self, write: Callable[[BatchJournal], None]) -> None:
        """Write to the journal; one that cannot be written is said once and given up."""
        if self.journal is None:
            return
        try:
            write(self.journal)
        except OSError as exc:
            path, self.journal = self.journal.path, None
            self._say(
                "journal",
                f"cannot write {path} ({exc.strerror or exc}): a rerun of this batch will "
                "send again the turns this run has sent",
            )

    # -- answers ---------------------------------------------------------------

    async def _follow(self, batch_id: str, number: int, named: dict[str, _Queued]) -> None:
        """Wait for the batch to end, then answer its calls from its results."""
        sent = said = time.monotonic()
        self._say(f"batch {batch_id}", _progress(number, batch_id, 0, len(named), 0.0))
        cancelled = False

        async def polled(batch: Any) -> None:
            nonlocal cancelled, said
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

        results = await self._results(batch_id, polled)
        if isinstance(results, ModelError):
            return self._fail(named.values(), results)
        for custom_id, queued in named.items():
            self._answer(queued, results.get(custom_id, _MISSING))

    async def _results(
        self, batch_id: str, polled: Callable[[Any], Awaitable[None]] | None = None
    ) -> dict[str, _Result] | ModelError:
        """The batch's results by custom_id, once it has ended: polled at a tenth of its age;
        its results read again if the reading breaks."""
        started = time.monotonic()
        failures = 0
        ended = False
        while True:
            try:
                if not ended:
                    age = time.monotonic() - started
                    await asyncio.sleep(min(max(age / 10, FIRST_POLL), LAST_POLL))
                    batch = await self.batches.retrieve(batch_id)
                    if batch.processing_status != "ended":
                        if polled is not None:
                            await polled(batch)
                        continue
                    ended = True
                results: dict[str, _Result] = {}
                async with self.batches.with_streaming_response.results(batch_id) as response:
                    async for line in response.iter_lines():
                        if line.strip():
                            read = _line_decoder.decode(line)
                            results[read.custom_id] = read.result
                return results
            except msgspec.DecodeError as exc:  # a proxy that answers with something else
                return ModelError("api", f"{batch_id}'s results are not batch results: {exc}")
            except self._api_error as exc:
                error = self.source.describe(exc)
                if error.kind not in RETRIED:
                    return error
                failures += 1
                await asyncio.sleep(backoff(failures))

    async def _from_earlier(self, batch_id: str, custom_id: str, turn: int) -> ModelReply | None:
        """An earlier run's answer to this same request, if it succeeded (None: send it)."""
        if batch_id not in self._earlier:
            self._earlier[batch_id] = asyncio.create_task(self._results(batch_id))
        results = await asyncio.shield(self._earlier[batch_id])
        result = results.get(custom_id) if isinstance(results, dict) else None
        if result is None or result.type != "succeeded":
            return None
        return message_reply(turn, result.message)

    def _answer(self, queued: _Queued, result: _Result) -> None:
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
            if error.get("type") not in _RETRIED_ERRORS:
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
