"""Model calls that lose nothing when the API pushes back.

``RetryingSource`` wraps the SDK source (one attempt per call) with the limiter and a retry
loop: a refusal (429), an overload (529), a server error (500, 502, 503, 504), a connection
that fails or an answer cut mid-way is tried again after the server's ``retry-after``, as
given, or where it sent none (or one too short to be meant, as a proxy's ``retry-after-ms:
1``) after a capped exponential backoff with jitter, never both, until the call's deadline;
what is refused as asked (400, 401, 403, 404, 413) is not, nor, past a few tries, a server
that has never answered (a wrong address). Only the answer that succeeds is kept, so a retried
call's usage counts once; a call that runs out of time fails with the kind it last met and
a message that says for how long it tried.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
from collections.abc import Callable

import msgspec

from isoagent.parent.model.limiter import SAID_SECONDS, Limiter, Waiting
from isoagent.parent.model.sdk import AnthropicSource
from isoagent.protocol import ModelCall, ModelError, ModelReply

RETRIED = frozenset({"rate_limit", "overloaded", "server", "connection"})
DEADLINE = 600.0  # seconds a call is retried for, by default
FIRST_DELAY = 0.5
MAX_DELAY = 8.0
UNREACHED_ATTEMPTS = 3  # tries of a server that has not answered once, before giving up
FALLBACK_AFTER = 3  # overloaded answers in a row before a call takes the fallback model
MEANT_RETRY_AFTER = 0.1  # seconds: a shorter retry-after is a proxy's reflex, not a limit

WaitSink = Callable[[Waiting], None]
_sizer = msgspec.msgpack.Encoder()

_WHAT = {
    "rate_limit": "rate limited",
    "overloaded": "API overloaded",
    "server": "API server error",
    "connection": "API connection lost",  # not made, or cut while the answer streamed
}


def backoff(attempt: int) -> float:
    """Seconds before retry ``attempt`` (1, 2, ...): doubling from FIRST_DELAY up to
    MAX_DELAY, the upper half of it at random so that calls do not retry in step."""
    doublings = min(attempt - 1, 32)  # past MAX_DELAY long before: no float overflow
    return min(MAX_DELAY, FIRST_DELAY * 2**doublings) * random.uniform(0.5, 1.0)


def retry_delay(retry_after: float, attempt: int) -> float:
    """Seconds before retry ``attempt``: the server's ``retry-after`` as given, or the backoff
    where it gave none or one too short to be meant (one or the other, never their maximum:
    the server knows when its limit refills, and a backoff on top of that only loses time)."""
    return retry_after if retry_after >= MEANT_RETRY_AFTER else backoff(attempt)


class RetryingSource:
    """The SDK source behind the limiter and the retry loop. One serves every call of an
    invocation, or (in the warm gateway) of every invocation of the user: they share the
    limiter, so they share what the API allows."""

    def __init__(
        self,
        source: AnthropicSource,
        *,
        deadline: float = DEADLINE,
        on_wait: WaitSink | None = None,
    ) -> None:
        self.source = source
        self.limiter = Limiter()
        self.deadline = deadline
        self.on_wait = on_wait
        # --fallback-model: (primary, fallback): a call to the primary model that is
        # overloaded FALLBACK_AFTER times in a row goes on with the fallback (Claude Code's)
        self.fallback: tuple[str, str] | None = None
        source.on_response = self.limiter.heard

    async def complete(
        self, call: ModelCall, *, deadline: float | None = None, on_wait: WaitSink | None = None
    ) -> ModelReply:
        seconds = self.deadline if deadline is None else deadline
        say = on_wait or self.on_wait or _ignore
        started = time.monotonic()
        ends = started + seconds
        size = len(_sizer.encode(call))  # about its JSON's size, for a fraction of the CPU
        attempt = 0  # answers that were retried: the attempts made, once one was
        error = ModelError("rate_limit", "held by the rate limit")  # until an answer says
        overloaded = 0  # in a row
        asked = call.model
        while True:
            permit = await self.limiter.admit(size, ends, say)
            if permit is None:  # the limiter would hold it past its deadline
                return _gave_up(call, error, attempt, started)
            reply = ModelReply(call.turn, error=ModelError("cancelled", "cancelled"))
            try:
                reply = await self.source.complete(call)
            finally:  # a cancelled call frees its place too
                self.limiter.answered(permit, reply)
            if reply.error is None or reply.error.kind not in RETRIED:
                answered = call.model if call.model != asked else ""
                return msgspec.structs.replace(reply, retries=attempt, model=answered)
            error = reply.error
            attempt += 1
            overloaded = overloaded + 1 if error.kind == "overloaded" else 0
            if self.fallback and overloaded >= FALLBACK_AFTER and call.model == self.fallback[0]:
                say(Waiting("fallback", f"{call.model} overloaded: using {self.fallback[1]}"))
                call = msgspec.structs.replace(call, model=self.fallback[1])
            unreached = error.kind == "connection" and not self.limiter.ever_answered
            if unreached and attempt >= UNREACHED_ATTEMPTS:  # a wrong address, not a blip
                said = f"{error.message} ({attempt} attempts; it has never answered)"
                failed = ModelError("connection", said)
                return ModelReply(call.turn, error=failed, retries=attempt - 1)
            if error.kind == "rate_limit":  # every call waits: in the limiter
                hold = self.limiter.refuse(retry_delay(error.retry_after, attempt))
                say(
                    Waiting(
                        "rate_limit",
                        f"rate limited: a call refused (429), holding {hold:.1f} s",
                        hold,
                    )
                )
                delay = 0.0
            else:  # the backoff grows with the API's failures in a row, not this call's
                delay = retry_delay(error.retry_after, max(self.limiter.failures, 1))
                say(Waiting(error.kind, _retrying(error, attempt, seconds), delay))
            if time.monotonic() + delay > ends:
                return _gave_up(call, error, attempt, started)
            if error.retry_after >= MEANT_RETRY_AFTER:  # as the server asked
                await asyncio.sleep(delay)
            else:
                await self.limiter.back_off(delay)

    async def aclose(self) -> None:
        await self.source.aclose()


def _retrying(error: ModelError, attempt: int, deadline: float) -> str:
    code = f" ({error.status_code})" if error.status_code else ""
    return (
        f"{_WHAT[error.kind]}{code}: retrying, attempt {attempt + 1} "
        f"(for up to {_duration(deadline)})"
    )


def _gave_up(call: ModelCall, error: ModelError, made: int, started: float) -> ModelReply:
    """The call's answer once its deadline has passed, after ``made`` attempts."""
    tried = _duration(time.monotonic() - started)
    message = (
        f"{_WHAT.get(error.kind, error.kind)} for {tried} ({made} attempts; "
        f"last: {error.message}); gave up at the retry deadline (--api-retry-deadline)"
    )
    failed = ModelError(error.kind, message, error.status_code, error.retry_after)
    return ModelReply(turn=call.turn, error=failed, retries=max(made - 1, 0))


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def _ignore(_waiting: Waiting) -> None:
    pass


REPEAT_SECONDS = 60.0  # a wait that goes on is said again after this


def _to_stderr(line: str) -> None:
    with contextlib.suppress(OSError):  # nobody reads stderr any more: calls go on
        print(line, file=sys.stderr, flush=True)


class WaitNotices:
    """An invocation's waits, said on stderr once per change of what is waited on (and
    once a minute while it lasts), not once per call: short waits of a kind are said once
    they add up to ``SAID_SECONDS``, with how many and how long in all; ``current`` is the
    latest while it lasts, for a progress line. ``say`` writes a line (a live display
    replaces it)."""

    def __init__(self) -> None:
        self.say: Callable[[str], None] = _to_stderr
        self._latest: Waiting | None = None
        self._until = 0.0  # when the latest wait ends
        self._said = ("", -REPEAT_SECONDS)  # the kind last said, and when
        self._waits: dict[str, tuple[int, float]] = {}  # by kind: how many, seconds in all

    def __call__(self, waiting: Waiting) -> None:
        now = time.monotonic()
        self._latest, self._until = waiting, now + max(waiting.seconds, 1.0)
        count, seconds = self._waits.get(waiting.kind, (0, 0.0))
        count, seconds = count + 1, seconds + waiting.seconds
        self._waits[waiting.kind] = (count, seconds)
        kind, when = self._said
        if waiting.seconds > 0 and seconds < SAID_SECONDS:  # a blip is not worth a line yet
            return
        if waiting.kind != kind or now - when >= REPEAT_SECONDS:
            self._said = (waiting.kind, now)
            so_far = f" ({count} waits, {seconds:.1f} s in all so far)" if count > 1 else ""
            self.say(f"isoagent: {waiting.message}{so_far}")

    @property
    def current(self) -> Waiting | None:
        return self._latest if time.monotonic() < self._until else None
