"""What happens in a run, as typed events.

One shape serves three readers: the JSONL transcripts on disk, the
``--output-format stream-json`` lines on stdout, and the progress display.
``jq`` filters written for one work on the others.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

import msgspec

from isoagent.protocol import Block, Progress, Result, Status, Usage


class Event(msgspec.Struct, tag_field="type", omit_defaults=True, kw_only=True):
    # when it was written to its transcript (``TranscriptWriter`` sets it): a run's timeline
    timestamp: datetime | None = None


class RunStarted(Event, tag="init"):
    run_id: str
    run_dir: str
    model: str
    workdir: str
    agents: list[str]
    session_id: str = ""  # its conversation's UUID (an earlier run's with --resume); "": its run id
    batch_input: str = ""  # isoagent batch: the file its tasks came from ("-": stdin)
    trace_id: str = ""  # its OpenTelemetry trace, when telemetry is on
    # of the price, what its model calls cost (``BATCH_PRICE`` with --api-batches): every
    # figure of its cost (lines, budget, logs, telemetry, the API's Result) prices by it
    price_rate: float = 1.0


class ChildStarted(Event, tag="child_started"):
    child: str
    agent: str
    description: str
    prompt: str
    model: str
    pid: int  # with --hosts: its pid on its host server's host, or its own launcher's here
    transcript: str
    host: str = ""  # with --hosts: where it runs
    parent: str = ""  # the child whose task call started it (--max-depth 2); "": the parent's


class MessageAdded(Event, tag="message"):
    """One message of a conversation; ``child`` is empty for the parent's own."""

    role: str
    content: list[Block]
    turn: int
    child: str = ""
    usage: Usage | None = None
    model: str = ""  # the model that answered, when not the one asked (--fallback-model)
    id: str = ""  # an answer's id, as the API gave it
    stop_reason: str = ""  # why an answer ended, as the API said


class ChildProgress(Event, tag="child_progress"):
    child: str
    agent: str
    description: str
    progress: Progress


class ChildFinished(Event, tag="child_result"):
    child: str
    agent: str
    description: str
    pid: int
    transcript: str
    result: Result
    exit_code: int | None = None
    retries: int = 0  # model-call attempts the gateway retried (rate limit, overload, ...)


class RunFinished(Event, tag="result"):
    result: Result
    run_dir: str
    children: list[ChildFinished] = []
    api_seconds: float = 0.0  # time spent waiting for model replies, all agents together
    retries: int = 0  # model-call attempts the gateway retried, all agents together
    structured_output: Any = None  # --json-schema: the parent's last valid answer
    structured_output_failed: bool = False  # it gave no valid answer in five tries
    trace_id: str = ""  # its OpenTelemetry trace, when telemetry is on


class TaskRecord(msgspec.Struct):
    """One ``isoagent batch`` output line: how one input line's task ended.

    ``status`` is a Result status, or ``invalid`` for an input line that could not be run
    (``error`` says why, ``line`` says where).
    """

    id: str | int
    status: Status | Literal["invalid"]
    line: int
    agent: str = ""
    summary: str = ""
    turns: int = 0
    tool_calls: int = 0
    tokens: Usage = msgspec.field(default_factory=Usage)
    seconds: float = 0.0
    transcript: str = ""
    error: str = ""
    retries: int = 0  # model-call attempts retried (rate limit, overload, server, connection)
    cost_usd: float = 0.0  # what its model calls cost
    # the batch's OpenTelemetry trace, when telemetry is on (else the line has no such key)
    trace_id: str | msgspec.UnsetType = msgspec.UNSET
    digest: str = ""  # of what defines the task (its agent and prompt): a resume compares it
    sig: str = ""  # isoagent's signature of the line (``batch/signature.py``): always last


AnyEvent = RunStarted | ChildStarted | MessageAdded | ChildProgress | ChildFinished | RunFinished
# one line of a transcript, as the parent wrote it
decode_event = msgspec.json.Decoder(AnyEvent).decode

Sink = Callable[[Event], None]


class Broadcast:
    """Fans one event out to every subscriber (transcripts, display, stream-json)."""

    def __init__(self) -> None:
        self.sinks: list[Sink] = []

    def __call__(self, event: Event) -> None:
        for sink in self.sinks:
            sink(event)
