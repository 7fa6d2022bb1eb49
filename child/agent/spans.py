"""Spans as data: how long an agent's steps took, recorded without OpenTelemetry.

A child has no network, so it cannot export telemetry: it records its spans here and sends
them in its Result, and the parent exports them (``parent/telemetry``). The parent's own
agent records into the same recorder, which hands each span on as it ends.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol

from isoagent.protocol import MAX_SPANS, Span, SpanValue

# the span a step runs in (0: none yet), which a span started now is under; the parent
# also reads it for the model calls and the children a step makes
current_span: ContextVar[int] = ContextVar("current_span", default=0)


@dataclass
class OpenSpan:
    """A span under way: its block may add attributes, or say why it failed."""

    attributes: dict[str, SpanValue] = field(default_factory=dict)
    error: str = ""


class Spans(Protocol):
    finished: list[Span]

    def span(
        self, name: str, attributes: dict[str, SpanValue]
    ) -> AbstractContextManager[OpenSpan]: ...


class SpanRecorder:
    def __init__(
        self, new_id: Callable[[], int], on_end: Callable[[Span], None] | None = None
    ) -> None:
        """``new_id``: each span's id; ``on_end``: takes each span as it ends (else the
        agent's own and the first others, ``MAX_SPANS`` in all, are kept in ``finished``)."""
        self.new_id = new_id
        self.on_end = on_end
        self.finished: list[Span] = []

    @contextlib.contextmanager
    def span(self, name: str, attributes: dict[str, SpanValue]) -> Iterator[OpenSpan]:
        """A span around the block, under the current one; an exception out of the block
        marks it failed."""
        span_id = self.new_id()
        parent = current_span.get()
        token = current_span.set(span_id)
        started = time.time_ns()
        step = OpenSpan(attributes)
        try:
            yield step
        except BaseException as exc:
            step.error = step.error or f"{type(exc).__name__}: {exc}"
            raise
        finally:
            current_span.reset(token)
            done = Span(span_id, parent, name, started, time.time_ns(), step.attributes, step.error)
            if self.on_end is not None:
                self.on_end(done)
            elif len(self.finished) < MAX_SPANS - 1 or not parent:  # the agent's ends last
                self.finished.append(done)


class NoSpans:
    """Telemetry is off: nothing is timed or kept."""

    def __init__(self) -> None:
        self.finished: list[Span] = []

    def span(self, name: str, attributes: dict[str, SpanValue]) -> AbstractContextManager[OpenSpan]:
        return contextlib.nullcontext(OpenSpan())
