"""One run's trace: its spans as data, with the ids the parent gives them.

The run is one trace and one span. The parent agent and each child are an agent span under
it (a child's under the ``Agent`` call that started it, if one did); each model call is a
span under its agent's, made by the gateway, which counts its tokens and its cost; each tool
call is a span under its agent's, made where the tool ran. A child's spans come over the
protocol (``Result.spans``) and are taken as a hostile process's: at most ``MAX_SPANS``,
names and attributes cut to size, times within the child's life, ids of the parent's own,
and a parent among the child's own spans.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import msgspec

from isoagent.child.agent.spans import SpanRecorder, current_span
from isoagent.parent.model.conversation import calling_for
from isoagent.parent.model.prices import cost_usd
from isoagent.parent.telemetry.config import TelemetryUnavailable, telemetry_enabled
from isoagent.protocol import MAX_SPANS, ModelCall, ModelReply, Result, Span, SpanValue

if TYPE_CHECKING:
    from isoagent.parent.records.events import ChildFinished

NAME_CAP = 128  # characters of a child's span name
KEY_CAP = 64  # of an attribute's name
VALUE_CAP = 256  # of a string attribute, or a span's error
ATTRIBUTES_CAP = 16  # attributes of a child's span
INT64 = (-(1 << 63), (1 << 63) - 1)  # what OTLP carries: a bigger int would fail the batch


class Export(Protocol):
    """Where ended spans and counts go: ``otel.OtelExport``."""

    def span(self, span: Span, pid: int = 0, host: str = "") -> None: ...

    def count(self, counter: str, amount: float, attributes: dict[str, SpanValue]) -> None: ...

    def close(self) -> None: ...


def new_span_id() -> int:
    return secrets.randbits(64) or 1


@dataclass
class ChildSpan:
    """A child's agent span, numbered when the child starts: its model calls go under it."""

    id: int
    parent: int
    start: int


class RunTrace:
    def __init__(self, export: Export, trace_id: int, run_id: str) -> None:
        self.export = export
        self.trace_id = trace_id
        self.run_id = run_id
        self.run_span = new_span_id()
        self.started = time.time_ns()
        self._ended = False
        self._children: dict[str, int] = {}  # each running child's agent span, by its id
        self.price_rate = 1.0  # of the price, what its calls cost (the session's)

    @classmethod
    def open(cls, env: Mapping[str, str], run_id: str) -> RunTrace | None:
        """The run's trace, or None when telemetry is off; raises ``TelemetryUnavailable``."""
        if not telemetry_enabled(env):
            return None
        try:
            from isoagent.parent.telemetry.otel import OtelExport
        except ImportError as exc:
            raise TelemetryUnavailable(
                f"the OpenTelemetry packages are not installed ({exc.name}): "
                "pip install 'isoagent[otel]'"
            ) from None
        trace_id = secrets.randbits(128) or 1
        return cls(OtelExport(env, trace_id), trace_id, run_id)

    @property
    def trace_id_hex(self) -> str:
        return f"{self.trace_id:032x}"

    def recorder(self) -> SpanRecorder:
        """For the parent agent: each of its spans is exported as it ends."""
        return SpanRecorder(new_span_id, self.export.span)

    def model_call(self, call: ModelCall, reply: ModelReply, started: int) -> None:
        """A span and counts for a model call the gateway made (``started``: Unix ns)."""
        model = reply.model or call.model
        usage = reply.usage
        cost = cost_usd(model, usage, self.price_rate)
        attributes: dict[str, SpanValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "anthropic",
            "gen_ai.request.model": call.model,
            "gen_ai.response.model": model,
            "gen_ai.agent.name": call.agent,
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
            "isoagent.cost_usd": cost,
            "isoagent.turn": call.turn,
            "isoagent.retries": reply.retries,
        }
        error = ""
        if reply.error is not None:
            attributes["error.type"] = reply.error.kind
            error = reply.error.message
        # a child's call, under its agent span; the parent agent's, under the span it is in
        parent = self._children.get(calling_for.get()) or current_span.get() or self.run_span
        name = f"chat {model}"
        self.export.span(
            Span(new_span_id(), parent, name, started, time.time_ns(), attributes, error)
        )
        who: dict[str, SpanValue] = {"model": model, "agent": call.agent}
        for kind, tokens in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cacheCreation", usage.cache_creation_input_tokens),
            ("cacheRead", usage.cache_read_input_tokens),
        ):
            if tokens:
                self.export.count("tokens", tokens, {**who, "type": kind})
        if cost:
            self.export.count("cost", cost, who)
        if reply.retries:
            self.export.count("retries", reply.retries, who)

    def child_started(self, child: str) -> ChildSpan:
        """Child ``child``'s agent span, under the span the caller is in (an ``Agent`` call's)."""
        span = ChildSpan(new_span_id(), current_span.get() or self.run_span, time.time_ns())
        self._children[child] = span.id
        return span

    def child_finished(
        self, child: ChildSpan, finished: ChildFinished, spans: list[Span], host: str = ""
    ) -> None:
        """Export the child's agent span and the spans it sent (its ``Result.spans``)."""
        self._children.pop(finished.child, None)
        result = finished.result
        known: dict[str, SpanValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": finished.agent,
            "isoagent.child": finished.child,
            "isoagent.status": result.status,
            "isoagent.turns": result.turns,
            "isoagent.tool_calls": result.tool_calls,
        }
        error = "" if result.status == "ok" else result.error or result.status
        name = f"invoke_agent {finished.agent}"
        agent = Span(child.id, child.parent, name, child.start, time.time_ns(), known, error)
        for span in adopt(spans, agent):
            self.export.span(span, finished.pid, host)
        self.export.count("tasks", 1, {"agent": finished.agent, "status": result.status})

    def finish(self, result: Result) -> None:
        """The run's span ends, as ``result`` says."""
        counts: dict[str, SpanValue] = {
            "isoagent.turns": result.turns,
            "isoagent.tool_calls": result.tool_calls,
        }
        error = "" if result.status == "ok" else result.error or result.status
        self._end_run(result.status, error, counts)

    def close(self) -> None:
        """Export what is left (the run's span, if no result ended it)."""
        self._end_run("error", "ended without a result")
        self.export.close()

    def _end_run(self, status: str, error: str, counts: dict[str, SpanValue] | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        attributes = {"isoagent.run_id": self.run_id, "isoagent.status": status, **(counts or {})}
        span = Span(self.run_span, 0, "isoagent", self.started, time.time_ns(), attributes, error)
        self.export.span(span)


def adopt(spans: list[Span], agent: Span) -> list[Span]:
    """``agent`` (a child's agent span, as the parent made it) and the child's ``spans``
    under it, as the parent exports them. The child's own agent span (id 1) lends ``agent``
    its times, within ``agent``'s, and its attributes, under the parent's; each other span
    gets an id of the parent's and, as its parent, one of the child's spans numbered before
    it, else ``agent``; at most ``MAX_SPANS`` are taken, each cut to size."""
    window = (agent.start, agent.end)
    ids = {1: agent.id}
    seen: set[int] = set()
    taken: list[Span] = []
    for span in sorted(spans, key=lambda s: s.id)[:MAX_SPANS]:
        if span.id < 1 or span.id in seen:
            continue
        seen.add(span.id)
        if span.id == 1:
            own = _cut(span, window, agent.id, agent.parent)
            agent = msgspec.structs.replace(
                agent, start=own.start, end=own.end, attributes=own.attributes | agent.attributes
            )
            continue
        parent = ids.get(span.parent, agent.id)  # before its own id is known: not itself
        ids[span.id] = new_span_id()
        taken.append(_cut(span, window, ids[span.id], parent))
    if dropped := len(spans) - len(seen):
        agent.attributes["isoagent.spans_dropped"] = dropped
    return [agent, *taken]


def _cut(span: Span, window: tuple[int, int], span_id: int, parent: int) -> Span:
    low, high = window
    start = min(max(span.start, low), high)
    end = min(max(span.end, start), high)
    attributes = {
        key[:KEY_CAP]: _value(value)
        for key, value in itertools.islice(span.attributes.items(), ATTRIBUTES_CAP)
        if key
    }
    name = span.name[:NAME_CAP]
    return Span(span_id, parent, name, start, end, attributes, span.error[:VALUE_CAP])


def _value(value: SpanValue) -> SpanValue:
    if isinstance(value, str):
        return value[:VALUE_CAP]
    if isinstance(value, int) and not isinstance(value, bool):
        return min(max(value, INT64[0]), INT64[1])
    return value
