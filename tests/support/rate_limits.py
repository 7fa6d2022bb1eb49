"""A Messages API that pushes back as the real one does, around any ``MessagesServer`` handler.

``RateLimited(handler, requests_per_second=4)`` meters requests (and, with
``input_tokens_per_second``, input tokens: a request's JSON bytes / 4, which its reply's
usage then reports) with token buckets that refill continuously and hold one second's worth
(``burst`` seconds' worth); every answer carries ``anthropic-ratelimit-{requests,input-tokens}-
{limit,remaining,reset}`` (``reset``: when the bucket is full again, RFC 3339) and a request
the bucket cannot pay for is answered ``429 rate_limit_error`` with ``retry-after`` in whole
seconds, as the API sends it. ``refused`` counts the 429s.

``Overloaded(handler, for_seconds=30, then_every=4)`` answers every request ``529
overloaded_error`` for the first ``for_seconds`` after its first request, then every
``then_every``-th one; of the answers it lets through after that, the first ``cut`` are
streams cut mid-way (the connection closed after 3 events).
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from tests.support.messages_server import Handler, Reply, Request, error_reply


@dataclass
class _Bucket:
    name: str
    rate: float  # per second
    capacity: float
    level: float
    at: float

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + self.rate * (now - self.at))
        self.at = now

    def headers(self, now: float) -> dict[str, str]:
        full_in = (self.capacity - self.level) / self.rate
        reset = datetime.fromtimestamp(time.time() + full_in, UTC)
        prefix = f"anthropic-ratelimit-{self.name}-"
        return {
            prefix + "limit": str(int(self.capacity)),
            prefix + "remaining": str(max(int(self.level), 0)),
            prefix + "reset": reset.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }


def request_tokens(request: Request) -> int:
    """What the server counts as a request's input tokens: its JSON's bytes / 4."""
    return max(len(json.dumps(request.body)) // 4, 1)


class RateLimited:
    def __init__(
        self,
        handler: Handler,
        *,
        requests_per_second: float = 0.0,
        input_tokens_per_second: float = 0.0,
        burst: float = 1.0,
        headers: bool = True,
    ) -> None:
        self.handler = handler
        self.headers = headers  # the ratelimit headers on every answer (a bare proxy: none)
        self.refused = 0
        self.admitted = 0
        self._lock = threading.Lock()
        now = time.monotonic()
        self._buckets = [
            _Bucket(name, rate, rate * burst, rate * burst, now)
            for name, rate in (
                ("requests", requests_per_second),
                ("input-tokens", input_tokens_per_second),
            )
            if rate
        ]

    def __call__(self, request: Request) -> Reply | list[Reply]:
        tokens = request_tokens(request)
        with self._lock:
            now = time.monotonic()
            costs = {"requests": 1.0, "input-tokens": float(tokens)}
            short = 0.0
            for bucket in self._buckets:
                bucket.refill(now)
                cost = min(costs[bucket.name], bucket.capacity)
                short = max(short, (cost - bucket.level) / bucket.rate)
            if short <= 0:
                for bucket in self._buckets:
                    bucket.level -= costs[bucket.name]
                self.admitted += 1
            else:
                self.refused += 1
            headers = {
                k: v
                for bucket in self._buckets
                if self.headers
                for k, v in bucket.headers(now).items()
            }
        if short > 0:
            wait = {"retry-after": str(math.ceil(short))}
            refused = error_reply(429, "rate_limit_error", "Rate limited", headers=wait)
            refused.headers.pop("retry-after-ms")
            refused.headers.update(headers)
            return refused
        replies = self.handler(request)
        if isinstance(replies, Reply):
            return replace(replies, usage=(tokens, replies.usage[1]), headers=headers)
        return [replace(r, usage=(tokens, r.usage[1]), headers=headers) for r in replies]


class Overloaded:
    def __init__(
        self, handler: Handler, *, for_seconds: float, then_every: int = 0, cut: int = 0
    ) -> None:
        self.handler = handler
        self.for_seconds = for_seconds
        self.then_every = then_every
        self.cut = cut  # answers still to be cut
        self.overloaded = 0  # 529s answered
        self._lock = threading.Lock()
        self._started = 0.0
        self._after = 0  # requests answered after the first for_seconds

    def __call__(self, request: Request) -> Reply | list[Reply]:
        with self._lock:
            now = time.monotonic()
            self._started = self._started or now
            refuse = now - self._started < self.for_seconds
            if not refuse and self.then_every:
                self._after += 1
                refuse = self._after % self.then_every == 0
            self.overloaded += refuse
            cut = not refuse and self.cut > 0
            self.cut -= cut
        if refuse:  # with no retry-after, as the API's 529s come
            overloaded = error_reply(529, "overloaded_error", "Overloaded")
            overloaded.headers.clear()
            return overloaded
        replies = self.handler(request)
        if not cut:
            return replies
        if isinstance(replies, Reply):
            return replace(replies, cut_after=3)
        return [replace(r, cut_after=3) for r in replies]
