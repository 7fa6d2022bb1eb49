"""``isoagent batch`` input: one task per line.

A line is a JSON object ``{"id": ..., "prompt": ..., "agent": ...}`` (``id`` and
``agent`` optional) or, if it does not start with ``{``, a plain-text prompt.
A task's id is its ``id`` or else its line number. Blank lines are skipped. A
line that cannot be run (invalid JSON, no prompt, unknown agent, an id used
before) becomes an ``invalid`` record saying why, and the other lines still run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import msgspec

from isoagent.parent.events import TaskRecord
from isoagent.protocol import AgentSpec

TaskId = str | int


class TaskLine(msgspec.Struct):
    prompt: str
    id: TaskId | None = None
    agent: str | None = None


@dataclass
class BatchTask:
    id: TaskId
    line: int
    prompt: str
    agent: AgentSpec


class _IdOnly(msgspec.Struct):
    id: TaskId | None = None


class _Invalid(Exception):
    def __init__(self, message: str, task_id: TaskId | None = None) -> None:
        super().__init__(message)
        self.task_id = task_id


def parse_tasks(
    lines: Iterable[str], agents: Mapping[str, AgentSpec], default_agent: str
) -> Iterator[BatchTask | TaskRecord]:
    """A BatchTask for each runnable line, an ``invalid`` TaskRecord for each bad one."""
    first_seen: dict[TaskId, int] = {}
    for number, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text:
            continue
        task_id: TaskId = number
        try:
            if text.startswith("{"):
                fields = _decode(text)
                task_id = fields.id if fields.id is not None else number
                prompt, agent_name = fields.prompt, fields.agent or default_agent
            else:
                prompt, agent_name = text, default_agent
            if task_id in first_seen:
                raise _Invalid(f"duplicate id {task_id!r} (first on line {first_seen[task_id]})")
            first_seen[task_id] = number
            if not prompt.strip():
                raise _Invalid("the prompt is empty")
            agent = agents.get(agent_name)
            if agent is None:
                raise _Invalid(unknown_agent(agent_name, agents))
        except _Invalid as exc:
            task_id = task_id if exc.task_id is None else exc.task_id
            yield TaskRecord(task_id, "invalid", number, error=f"line {number}: {exc}")
            continue
        yield BatchTask(task_id, number, prompt, agent)


def unknown_agent(name: str, agents: Mapping[str, AgentSpec]) -> str:
    return f"unknown agent {name!r}; choose one of: {', '.join(agents)}"


def _decode(text: str) -> TaskLine:
    """The line's fields; when they are wrong, the error keeps the line's id if it has one."""
    try:
        return msgspec.json.decode(text, type=TaskLine)
    except msgspec.ValidationError as exc:
        try:
            task_id = msgspec.json.decode(text, type=_IdOnly).id
        except msgspec.ValidationError:
            task_id = None
        raise _Invalid(str(exc), task_id) from None
    except msgspec.DecodeError as exc:
        raise _Invalid(f"invalid JSON: {exc}") from None
