"""A run folder read back: its agents, what each used and cost, and how the run ended.

The one reading of ``.isoagent/runs/<run-id>/`` behind ``isoagent logs`` (its list, its tree,
its ``--json`` and its timeline): ``run.jsonl`` holds the run and the parent's conversation,
one ``child-*.jsonl`` per child holds that child's. Tokens and cost are the transcripts' own:
the sum of every answer's usage, priced by the model that gave it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import msgspec

from isoagent.parent.model.prices import cost_usd
from isoagent.parent.records.events import (
    AnyEvent,
    ChildFinished,
    ChildStarted,
    MessageAdded,
    RunFinished,
    RunStarted,
    decode_event,
)
from isoagent.protocol import Result, TextBlock, ToolUseBlock, Usage


def read_events(path: Path) -> list[AnyEvent]:
    """The events of one transcript; a line that does not decode is skipped."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        return []
    events = []
    for line in lines:
        try:
            events.append(decode_event(line))
        except msgspec.DecodeError:
            continue
    return events


@dataclass
class AgentLog:
    """One agent of a run: the parent (``child`` is "") or a child, with its transcript."""

    child: str
    agent: str
    model: str
    events: list[AnyEvent]
    started: ChildStarted | None = None  # a child's start, as run.jsonl has it
    finished: ChildFinished | None = None
    price_rate: float = 1.0  # the run's (``RunStarted.price_rate``)

    @property
    def messages(self) -> list[MessageAdded]:
        return [e for e in self.events if isinstance(e, MessageAdded) and e.child == self.child]

    @property
    def answers(self) -> list[MessageAdded]:
        """The model's messages: each carries the usage of the call that gave it."""
        return [m for m in self.messages if m.role == "assistant"]

    @functools.cached_property
    def usage(self) -> Usage:
        return sum((m.usage for m in self.answers if m.usage), Usage())

    @functools.cached_property
    def cost(self) -> float:
        return sum(self.price(m) for m in self.answers if m.usage)

    def price(self, answer: MessageAdded) -> float:
        """What the call that gave ``answer`` cost, priced by the model that gave it."""
        return cost_usd(answer.model or self.model, answer.usage or Usage(), self.price_rate)

    @property
    def result(self) -> Result | None:
        return self.finished.result if self.finished else None

    @property
    def status(self) -> str:
        return self.result.status if self.result else "unfinished"

    @property
    def tool_calls(self) -> int:
        return sum(isinstance(b, ToolUseBlock) for m in self.answers for b in m.content)

    @property
    def turns(self) -> int:
        """Its model turns in this run: the answers it was given (an earlier conversation a
        resumed run goes on with is in its transcript, without usage, and is not one)."""
        return sum(m.usage is not None for m in self.answers)

    @property
    def asked_by(self) -> str:
        """The child whose ``task`` call started it ("": the parent's, or the batch's)."""
        return self.started.parent if self.started else ""


@dataclass
class PastRun:
    path: Path
    events: list[AnyEvent]  # run.jsonl's
    parent: AgentLog
    children: list[AgentLog]

    @classmethod
    def read(cls, path: Path) -> PastRun:
        events = read_events(path / "run.jsonl")
        start = next((e for e in events if isinstance(e, RunStarted)), None)
        rate = start.price_rate if start else 1.0
        parent = AgentLog("", "parent", start.model if start else "", events, price_rate=rate)
        started = {e.child: e for e in events if isinstance(e, ChildStarted)}
        finished = {e.child: e for e in events if isinstance(e, ChildFinished)}
        children = []
        for child in sorted(started.keys() | finished.keys()):
            known = started.get(child) or finished[child]
            transcript = read_events(path / Path(known.transcript).name)
            own_start = next((e for e in transcript if isinstance(e, ChildStarted)), None)
            own_end = next((e for e in transcript if isinstance(e, ChildFinished)), None)
            begun = own_start or started.get(child)
            children.append(
                AgentLog(
                    child,
                    known.agent,
                    begun.model if begun else "",
                    transcript,
                    begun,
                    own_end or finished.get(child),
                    rate,
                )
            )
        return cls(path, events, parent, children)

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def start(self) -> RunStarted | None:
        return next((e for e in self.events if isinstance(e, RunStarted)), None)

    @property
    def final(self) -> RunFinished | None:
        """How the run ended: its last ``RunFinished`` (a command that failed after its run
        ended, its answer not written, records a second one that says so)."""
        return next((e for e in reversed(self.events) if isinstance(e, RunFinished)), None)

    @property
    def agents(self) -> list[AgentLog]:
        return [self.parent, *self.children]

    @property
    def status(self) -> str:
        return self.final.result.status if self.final else "unfinished"

    @property
    def usage(self) -> Usage:
        return sum((a.usage for a in self.agents), Usage())

    @property
    def cost(self) -> float:
        return sum(a.cost for a in self.agents)

    @property
    def turns(self) -> int:
        """Every agent's model turns, as its tokens and cost are every agent's."""
        return sum(a.turns for a in self.agents)

    def children_of(self, child: str) -> list[AgentLog]:
        """The children ``child`` started ("": the parent's own, or a batch's tasks)."""
        return [c for c in self.children if c.asked_by == child]

    @property
    def tool_calls(self) -> int:
        return sum(a.tool_calls for a in self.agents)

    @property
    def seconds(self) -> float | None:
        return self.final.result.duration if self.final else None

    @property
    def failed(self) -> list[AgentLog]:
        """The children that did not end ok (an unfinished one of a finished run too)."""
        return [c for c in self.children if c.status != "ok" and (c.finished or self.final)]

    @property
    def label(self) -> str:
        """What the run was asked: a batch's input file, else the first prompt."""
        start = self.start
        if start is not None and start.batch_input:
            where = "stdin" if start.batch_input == "-" else start.batch_input
            return f"batch {where}"
        first = next((m for m in self.parent.messages if m.role == "user"), None)
        if first is not None:
            return " ".join(b.text for b in first.content if isinstance(b, TextBlock))
        return next((c.started.prompt for c in self.children if c.started), "")

    @property
    def started_at(self) -> datetime | None:
        return self.events[0].timestamp if self.events else None
