"""The API's rate limits, learned from its answers, as a queue in front of it.

The Messages API meters requests, input tokens and output tokens with token buckets, and
says where each stands in every answer's headers (``anthropic-ratelimit-requests-limit``,
``-remaining``, ``-reset``; the same for ``input-tokens``, ``output-tokens`` and ``tokens``).
The limiter keeps a copy of each bucket: what the server said it held when a call was sent,
plus what it has refilled since, minus what the calls sent since have taken. A call is
admitted when every bucket holds what it will take, so calls wait here, in order, rather
than being refused. A refusal (429) holds every call until its ``retry-after``; overload
and failures halve the number of calls let in flight, and each answer lets one more in.

A server that sends no such headers (a proxy's bare 429) still says, by refusing, that its
requests ran out: the limiter then keeps a requests bucket of its own, as large as what
the server let through in the refusal's ``retry-after`` before it, refilled at that rate,
so the calls held do not all go at once when the hold ends, to be refused again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import msgspec

from isoagent.protocol import ModelReply

BUCKETS = ("requests", "input-tokens", "output-tokens", "tokens")
INITIAL_WINDOW = 4.0  # calls in flight before the API has answered one
SAID_SECONDS = 1.0  # waits of a kind are said once they add up to this
THROUGH_KEPT = 10_000  # calls that went through, remembered for a bare 429's bucket
BARE_MARGIN = 0.97  # of the rate a bare 429 suggests: a little under, not refused at its edge
TOKENS_PER_BYTE = 0.3  # a first guess at a request's input tokens, corrected by its usage


@dataclass
class Bucket:
    """One of the server's token buckets, as last heard of."""

    limit: float
    rate: float  # refilled per second
    level: float
    at: float  # monotonic time of ``level``
    heard_from: float = -math.inf  # when the call whose answer said it was sent

    def now(self, now: float) -> float:
        return min(self.limit, self.level + self.rate * (now - self.at))

    def wait(self, cost: float, now: float) -> float:
        """Seconds until it holds ``cost`` (or is full, for a call bigger than it)."""
        short = min(cost, self.limit) - self.now(now)
        return short / self.rate if short > 0 and self.rate > 0 else 0.0

    def take(self, cost: float, now: float) -> None:
        self.level, self.at = self.now(now) - cost, now


@dataclass
class Permit:
    """One admitted call: when it was sent and what it was counted to take."""

    sent: float  # monotonic
    sent_wall: float  # time.time(), to read the server's reset times against
    costs: dict[str, float]
    taken_before: dict[str, float]  # every admitted call's costs up to and with this one
    size: int  # the request's bytes


class Waiting(msgspec.Struct, tag=True):
    """What a call is waiting on, for the user (from the warm gateway, a frame):
    ``kind`` is the ModelError kind it waits out, ``message`` the line that says so."""

    kind: str
    message: str
    seconds: float = 0.0  # how long this wait is to last


_permit: contextvars.ContextVar[Permit | None] = contextvars.ContextVar("permit", default=None)


@dataclass
class Limiter:
    """Shared by every call of a gateway (in the warm gateway, of every invocation)."""

    buckets: dict[str, Bucket] = field(default_factory=dict)
    hold_until: float = 0.0  # after a 429: nothing is sent before
    window: float = INITIAL_WINDOW
    in_flight: int = 0
    _queued: int = 0  # calls waiting for their turn
    tokens_per_byte: float = TOKENS_PER_BYTE
    refused: int = 0  # 429 answers seen
    # when calls went through (monotonic, the latest last): a bare 429's bucket is made of
    # those of its retry-after
    _through: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=THROUGH_KEPT)
    )
    _headers_heard: bool = False  # the server says its buckets: none is made up
    ever_answered: bool = False  # the server has answered a call (any status)
    failures: int = 0  # overloads and failures since the last call that went through
    _taken: dict[str, float] = field(default_factory=lambda: dict.fromkeys(BUCKETS, 0.0))
    _queue: asyncio.Lock = field(default_factory=asyncio.Lock)
    _news: asyncio.Event = field(default_factory=asyncio.Event)  # see ``_changed``
    _recovered: asyncio.Event = field(default_factory=asyncio.Event)

    async def admit(
        self, size: int, deadline: float, on_wait: Callable[[Waiting], None] | None = None
    ) -> Permit | None:
        """Wait, in order of arrival, until a call of ``size`` bytes may be sent; None if
        that would be after ``deadline`` (monotonic)."""
        costs = {
            "requests": 1.0,
            "input-tokens": size * self.tokens_per_byte,
            "output-tokens": 1.0,  # unknown before the answer: only "not used up"
            "tokens": size * self.tokens_per_byte,
        }
        requests = self.buckets.get("requests")
        behind = self._queued / requests.rate if requests is not None else 0.0
        if on_wait is not None and behind > 0:  # the calls ahead alone are a wait
            on_wait(Waiting("rate_limit", self._describe("requests", behind), behind))
        self._queued += 1
        try:
            await asyncio.wait_for(self._queue.acquire(), max(deadline - time.monotonic(), 0))
        except TimeoutError:
            return None
        finally:
            self._queued -= 1
        try:
            if not await self._turn(costs, deadline, on_wait):
                return None
            now = time.monotonic()
            for name, bucket in self.buckets.items():
                bucket.take(costs[name], now)
            for name in BUCKETS:
                self._taken[name] += costs[name]
            self.in_flight += 1
        finally:
            self._queue.release()
        permit = Permit(now, time.time(), costs, dict(self._taken), size)
        _permit.set(permit)
        return permit

    async def _turn(
        self,
        costs: Mapping[str, float],
        deadline: float,
        on_wait: Callable[[Waiting], None] | None,
    ) -> bool:
        """At the head of the queue: wait until the buckets, a 429's hold and the window
        let the call go (True), or its deadline would pass first (False)."""
        said = ""
        while True:
            now = time.monotonic()
            wait, kind = self._wait(costs, now)
            if wait <= 0 and self.in_flight < self.window:
                return True
            if now + max(wait, 0.0) > deadline:
                return False
            if wait > 0 and on_wait is not None and said != kind:
                said = kind
                on_wait(Waiting("rate_limit", self._describe(kind, wait), wait))
            # until the wait is over, or news changes it (an answer, its headers, a 429): a
            # wait reckoned from a bucket that the answers on their way were about to
            # correct would otherwise be slept through whole
            self._news.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._news.wait(), wait if wait > 0 else deadline - now)

    def _wait(self, costs: Mapping[str, float], now: float) -> tuple[float, str]:
        """The longest wait any bucket (or a 429's hold) asks for, and which."""
        wait, kind = self.hold_until - now, "hold"
        for name, bucket in self.buckets.items():
            if (w := bucket.wait(costs[name], now)) > wait:
                wait, kind = w, name
        return wait, kind

    def _describe(self, kind: str, wait: float) -> str:
        bucket = self.buckets.get("requests" if kind == "hold" else kind)
        what = "" if bucket is None else f" ({bucket.rate * 60:.0f} {_NAMES[kind]}/min)"
        queued = f"{self._queued} calls queued, " if self._queued > 1 else ""
        return f"rate limited{what}: {queued}waiting {wait:.1f} s"

    def heard(self, status: int, headers: Mapping[str, str]) -> None:
        """An answer's headers (the SDK source's ``on_response``): the buckets as the
        server saw them when the call was sent, a 429's hold."""
        self.ever_answered = True
        permit = _permit.get()
        if permit is None:
            return
        now = time.monotonic()
        for name in BUCKETS:
            prefix = f"anthropic-ratelimit-{name}-"
            try:
                limit = float(headers[prefix + "limit"])
                remaining = float(headers[prefix + "remaining"])
            except (KeyError, ValueError):
                continue
            self._headers_heard = True
            refill_in = _reset_in(headers, prefix, permit)
            self._learn(name, limit, remaining, refill_in, permit, now)
        if status == 429:
            self.refused += 1
        self._changed()

    def _learn(
        self,
        name: str,
        limit: float,
        remaining: float,
        refill_in: float,
        permit: Permit,
        now: float,
    ) -> None:
        bucket = self.buckets.get(name)
        if bucket is not None and permit.sent < bucket.heard_from:
            return  # an older call's news
        rate = bucket.rate if bucket is not None else limit / 60  # the API's: per minute
        if remaining < limit and refill_in > 0:  # the deficit refills by the reset
            seen = min(max((limit - remaining) / refill_in, limit / 60), limit)
            rate = seen if bucket is None else 0.5 * rate + 0.5 * seen
        spent_since = self._taken[name] - permit.taken_before[name]
        level = remaining + rate * (now - _told_at(permit, now)) - spent_since
        self.buckets[name] = Bucket(limit, rate, min(level, limit), now, permit.sent)

    def refuse(self, hold: float) -> float:
        """A 429: every call waits ``hold`` seconds (the server's retry-after, or a backoff
        where it gave none to go by); how long from now."""
        now = time.monotonic()
        self.hold_until = max(self.hold_until, now + hold)
        if not self._headers_heard and hold > 0:
            through = sum(1 for sent in self._through if sent >= now - hold)
            size = float(max(through, 1))  # it refills at least one call by the hold's end
            rate = size / hold * BARE_MARGIN
            self.buckets["requests"] = Bucket(size, rate, 0.0, now, now)
        self._changed()
        return self.hold_until - now

    def answered(self, permit: Permit, reply: ModelReply) -> None:
        """A call is back: free its place, widen or narrow the window, and correct the
        buckets by what the call really took."""
        self.in_flight -= 1
        error = reply.error
        if error is None:
            self.window += 1
            self._through.append(permit.sent)
            if self.failures:  # the API answers again: calls backing off may try now
                self.failures = 0
                self._recovered.set()
                self._recovered = asyncio.Event()
            used_in = reply.usage.input_tokens + reply.usage.cache_creation_input_tokens
            used = {
                "requests": 1.0,
                "input-tokens": float(used_in),
                "output-tokens": float(reply.usage.output_tokens),
                "tokens": float(used_in + reply.usage.output_tokens),
            }
            for name, bucket in self.buckets.items():
                if bucket.heard_from < permit.sent:  # it holds our guess of this call
                    bucket.level += permit.costs[name] - used[name]
            if used_in and permit.size:
                seen = (used_in + reply.usage.cache_read_input_tokens) / permit.size
                self.tokens_per_byte = 0.8 * self.tokens_per_byte + 0.2 * seen
        elif error.kind in ("overloaded", "server", "connection"):
            self.window = max(1.0, self.window / 2)
            self.failures += 1
        self._changed()

    def _changed(self) -> None:
        """What the limiter knows changed: the call at the head of the queue reckons again."""
        self._news.set()

    async def back_off(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if a call goes through meanwhile: then the API is
        answering again, and the window, not the backoff, says how many may try."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._recovered.wait(), seconds)


_NAMES = {
    "hold": "requests",
    "requests": "requests",
    "input-tokens": "input tokens",
    "output-tokens": "output tokens",
    "tokens": "tokens",
}


def _told_at(permit: Permit, now: float) -> float:
    """When the server saw the call whose answer is heard ``now`` (monotonic): half-way.
    Taking the sending (as this did) counted the way there, long on a loaded machine, as
    refill time: at 1 request/s a 0.3 s way taught 0.77 requests/s."""
    return (permit.sent + now) / 2


def _reset_in(headers: Mapping[str, str], prefix: str, permit: Permit) -> float:
    """Seconds from when the server saw the call until the bucket is full again (RFC 3339)."""
    try:
        reset = datetime.fromisoformat(headers[prefix + "reset"]).timestamp()
    except (KeyError, ValueError):
        return 0.0
    return reset - (permit.sent_wall + time.time()) / 2
