"""The model gateway: the one place every model turn of a run goes through.

Children never talk to the API; they send ``ModelCall`` frames and the
supervisor hands them here. The gateway caps concurrent calls, keeps the
token budget and the usage count, and asks its source (the SDK, a cassette)
for the reply.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from typing import Protocol

from isoagent.parent.model.conversation import calling_for
from isoagent.parent.model.stream import listener
from isoagent.protocol import ModelCall, ModelError, ModelReply, Usage


class ModelSource(Protocol):
    async def complete(self, call: ModelCall) -> ModelReply: ...

    async def aclose(self) -> None:
        """Release connections; called once, by the session, after the last call."""


class Gateway:
    def __init__(self, source: ModelSource, *, max_concurrent: int = 16) -> None:
        """``source``: the SDK's, a cassette, behind the run's budgets (``cost_budget``)."""
        self.source = source
        self.usage = Usage()
        self.api_seconds = 0.0  # summed over calls, concurrent ones included
        self.retries = 0  # refused or failed attempts retried, over every call
        self.rejected: ModelError | None = None  # the key was refused (401): it stays refused
        # each agent's latest failed call, by child id ("": the parent's): what kind
        self.failures: dict[str, ModelError] = {}
        self._slots = asyncio.Semaphore(max_concurrent)
        # who hears the events of streamed calls, with the child whose call it is ("": the
        # parent's), and whether children's calls too: --include-partial-messages, progress
        self._hearers: list[tuple[Callable[[str, bytes], None], bool]] = []
        # hears every call once answered, with when it started (Unix ns): telemetry
        self.on_call: Callable[[ModelCall, ModelReply, int], None] | None = None

    def listen(self, hear: Callable[[str, bytes], None], *, children: bool) -> None:
        """``hear(child, event)`` for every event of the parent's streamed calls, and of
        the children's too if ``children``."""
        self._hearers.append((hear, children))

    async def call(self, call: ModelCall) -> ModelReply:
        """One model turn; see ``_call``."""
        started = time.time_ns()
        reply = await self._call(call)
        if self.on_call is not None:
            self.on_call(call, reply, started)
        return reply

    async def _call(self, call: ModelCall) -> ModelReply:
        """One model turn, in a slot of the concurrency cap."""
        async with self._slots:
            if self.rejected is not None:  # it would be refused again: spare the server
                return ModelReply(turn=call.turn, error=self.rejected)
            started = time.monotonic()
            child = calling_for.get()
            if hearers := [hear for hear, children in self._hearers if children or not child]:
                listener.set(functools.partial(_tell, hearers, child))
            reply = await self.source.complete(call)
            self.api_seconds += time.monotonic() - started
        error = reply.error
        if error is not None:
            self.failures[calling_for.get()] = error
        if error is not None and error.kind == "auth" and error.status_code == 401:
            self.rejected = error
        self.usage = self.usage + reply.usage
        self.retries += reply.retries
        return reply


def _tell(hearers: list[Callable[[str, bytes], None]], child: str, event: bytes) -> None:
    for hear in hearers:
        hear(child, event)
